"""One frozen Settings object built from the environment, validated at start.

Web, worker, clock, the `webhooks` command and Alembic all call `Settings.from_env()`.
A bad value raises ConfigError whose message is one line naming the variable.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from shared.errors import ConfigError, MissingVariable

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

PROVIDER_SECRET_VARIABLES: dict[str, str] = {
    "stripe": "STRIPE_WEBHOOK_SECRET",
    "paddle": "PADDLE_WEBHOOK_SECRET",
    "shopify": "SHOPIFY_WEBHOOK_SECRET",
    "github": "GITHUB_WEBHOOK_SECRET",
    "slack": "SLACK_SIGNING_SECRET",
    "standard": "STANDARD_WEBHOOK_SECRET",
}

DATABASE_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
BROKER_SCHEMES = ("redis", "rediss", "unix", "amqp", "amqps")


@dataclass(frozen=True)
class Settings:
    # None when unset: every Procfile process then refuses to start (require_servers);
    # only `webhooks dev` and the tests start embedded servers instead.
    database_url: str | None = None
    broker_url: str | None = None
    port: int = 8000
    secrets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    tolerance_seconds: int = 300
    max_body_bytes: int = 2_097_152
    job_max_attempts: int = 8
    job_retry_base_seconds: float = 2.0
    sweep_interval_seconds: float = 15.0
    retention_days: int = 30
    postmark_server_token: str | None = None
    postmark_api_url: str = "https://api.postmarkapp.com"
    email_from: str = "billing@example.com"
    handler_modules: tuple[str, ...] = ()
    data_dir: Path = Path(".webhooks")
    log_format: str = "text"
    log_level: str = "INFO"
    # Reconciliation: each provider's API credentials (None: not reconciled) and base URL.
    stripe_api_key: str | None = None
    stripe_api_base: str = "https://api.stripe.com"
    paddle_api_key: str | None = None
    paddle_api_base: str = "https://api.paddle.com"
    github_token: str | None = None
    github_api_base: str = "https://api.github.com"
    github_hooks: tuple[str, ...] = ()
    reconcile_interval_seconds: float = 3600.0  # 0: the clock does not reconcile
    # Ingress: the networks each provider's deliveries may come from (absent: any), and how
    # many reverse proxies in front of `web` append to X-Forwarded-For.
    allowed_networks: Mapping[str, tuple[IPNetwork, ...]] = field(default_factory=dict)
    trusted_proxies: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            database_url=_database_url(env),
            broker_url=_broker_url(env),
            port=_integer(env, "PORT", 8000, minimum=1, maximum=65535),
            secrets=_secrets(env),
            tolerance_seconds=_integer(env, "WEBHOOK_TOLERANCE_SECONDS", 300, minimum=1),
            max_body_bytes=_integer(env, "MAX_BODY_BYTES", 2_097_152, minimum=1),
            job_max_attempts=_integer(env, "JOB_MAX_ATTEMPTS", 8, minimum=1),
            job_retry_base_seconds=_number(env, "JOB_RETRY_BASE_SECONDS", 2.0),
            sweep_interval_seconds=_number(env, "SWEEP_INTERVAL_SECONDS", 15.0, positive=True),
            retention_days=_integer(env, "RETENTION_DAYS", 30, minimum=1),
            postmark_server_token=env.get("POSTMARK_SERVER_TOKEN") or None,
            postmark_api_url=_http_url(env, "POSTMARK_API_URL", "https://api.postmarkapp.com"),
            email_from=_email(env, "EMAIL_FROM", "billing@example.com"),
            handler_modules=_names(env.get("WEBHOOK_HANDLERS", "")),
            data_dir=Path(env.get("WEBHOOKS_DATA_DIR") or ".webhooks").absolute(),
            log_format=_choice(env, "LOG_FORMAT", "text", ("text", "json")),
            log_level=_choice(env, "LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR")),
            stripe_api_key=env.get("STRIPE_API_KEY") or None,
            stripe_api_base=_http_url(env, "STRIPE_API_BASE", "https://api.stripe.com"),
            paddle_api_key=env.get("PADDLE_API_KEY") or None,
            paddle_api_base=_http_url(env, "PADDLE_API_BASE", "https://api.paddle.com"),
            github_token=env.get("GITHUB_TOKEN") or None,
            github_api_base=_http_url(env, "GITHUB_API_BASE", "https://api.github.com"),
            github_hooks=_github_hooks(env),
            reconcile_interval_seconds=_number(env, "RECONCILE_INTERVAL_SECONDS", 3600.0),
            allowed_networks=_allowed_networks(env),
            trusted_proxies=_integer(env, "TRUSTED_PROXIES", 0, minimum=0, maximum=32),
        )

    def secrets_for(self, provider: str) -> tuple[str, ...]:
        return self.secrets.get(provider, ())

    def require_servers(self, *, broker: bool = True) -> None:
        """MissingVariable unless DATABASE_URL (and BROKER_URL) are set. A deploy that
        forgot one must stop at once, never acknowledge webhooks into a local folder."""
        missing = [name for name, value in (("DATABASE_URL", self.database_url),
                                            ("BROKER_URL", self.broker_url if broker else ""))
                   if value is None]
        if missing:
            raise MissingVariable(missing[0], NO_EMBEDDED_SERVERS)


NO_EMBEDDED_SERVERS = "deployed processes never start an embedded server (only `webhooks dev` does)"


# A hook's API path: repos/OWNER/REPO/hooks/ID or orgs/ORG/hooks/ID.
GITHUB_HOOK = re.compile(r"(repos/[\w.-]+/[\w.-]+|orgs/[\w.-]+)/hooks/\d+")


def _github_hooks(env: Mapping[str, str]) -> tuple[str, ...]:
    hooks = tuple(hook.strip("/") for hook in _names(env.get("GITHUB_HOOKS", "")))
    for hook in hooks:
        if not GITHUB_HOOK.fullmatch(hook):
            raise ConfigError("GITHUB_HOOKS", f"{hook!r} is not repos/OWNER/REPO/hooks/ID "
                                              "or orgs/ORG/hooks/ID")
    return hooks


def _allowed_networks(env: Mapping[str, str]) -> dict[str, tuple[IPNetwork, ...]]:
    """<PROVIDER>_ALLOWED_IPS: IPv4 and IPv6 addresses and CIDR ranges, comma-separated."""
    found = {}
    for provider in PROVIDER_SECRET_VARIABLES:
        variable = f"{provider.upper()}_ALLOWED_IPS"
        entries = _names(env.get(variable, ""))
        if not entries:
            continue
        networks = []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                raise ConfigError(variable, f"{entry!r} is not an IP address or CIDR range"
                                  ) from None
        found[provider] = tuple(networks)
    return found


def _names(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _secrets(env: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    found = {}
    for provider, variable in PROVIDER_SECRET_VARIABLES.items():
        values = _names(env.get(variable, ""))
        if provider == "standard":
            for value in values:
                _standard_secret(variable, value)
        if values:
            found[provider] = values
    return found


def _standard_secret(variable: str, value: str) -> None:
    """Standard Webhooks secrets are `whsec_` + base64; refuse anything else at start."""
    try:
        decoded = base64.b64decode(value.removeprefix("whsec_"), validate=True)
    except (ValueError, binascii.Error):
        decoded = b""
    if not decoded:
        raise ConfigError(variable, "must be whsec_ followed by base64")


def _database_url(env: Mapping[str, str]) -> str | None:
    raw = env.get("DATABASE_URL", "").strip()
    if not raw:
        return None
    parts = _split(raw, "DATABASE_URL")
    if parts.scheme not in DATABASE_SCHEMES:
        raise ConfigError("DATABASE_URL", f"scheme must be postgresql://, not {parts.scheme!r}")
    if not parts.path.strip("/") and "host=" not in parts.query:
        raise ConfigError("DATABASE_URL", "no database name in the URL")
    return raw


def _broker_url(env: Mapping[str, str]) -> str | None:
    raw = env.get("BROKER_URL", "").strip()
    if not raw:
        return None
    parts = _split(raw, "BROKER_URL")
    if parts.scheme not in BROKER_SCHEMES:
        raise ConfigError("BROKER_URL", f"scheme must be redis:// or amqp://, not {parts.scheme!r}")
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError("BROKER_URL", "no host in the URL")
    return raw


def _split(raw: str, variable: str):  # type: ignore[no-untyped-def]
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as error:
        raise ConfigError(variable, f"not a valid URL ({error})") from None
    return parts


def _http_url(env: Mapping[str, str], variable: str, default: str) -> str:
    raw = env.get(variable, "").strip() or default
    parts = _split(raw, variable)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(variable, "must be an http:// or https:// URL")
    return raw.rstrip("/")


def _email(env: Mapping[str, str], variable: str, default: str) -> str:
    raw = env.get(variable, "").strip() or default
    if "@" not in raw:
        raise ConfigError(variable, f"{raw!r} is not an email address")
    return raw


def _choice(env: Mapping[str, str], variable: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = env.get(variable, "").strip() or default
    matches = [value for value in allowed if value.lower() == raw.lower()]
    if not matches:
        raise ConfigError(variable, f"must be one of {', '.join(allowed)}, not {raw!r}")
    return matches[0]


def _integer(
    env: Mapping[str, str],
    variable: str,
    default: int,
    minimum: int = 0,
    maximum: int | None = None,
) -> int:
    raw = env.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(variable, f"must be a whole number, not {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and at most {maximum}" if maximum is not None else ""
        raise ConfigError(variable, f"must be at least {minimum}{upper}, not {value}")
    return value


def _number(env: Mapping[str, str], variable: str, default: float, positive: bool = False) -> float:
    raw = env.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(variable, f"must be a number, not {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise ConfigError(variable, f"must be a non-negative number, not {raw!r}")
    if positive and value == 0:
        raise ConfigError(variable, "must be greater than 0")
    return value
