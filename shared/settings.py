"""One frozen Settings object built from the environment, validated at start.

Web, worker, clock, the `webhooks` command and Alembic all call `Settings.from_env()`.
Each field is one variable (or one per provider), declared where the field is: its name,
parser, default and doc (shared.variables). A bad value raises ConfigError whose message
is one line naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhooks.shared import call_targets
from webhooks.shared import sources as s
from webhooks.shared import variables as v
from webhooks.shared.call_targets import Target
from webhooks.shared.errors import ConfigError, MissingVariable
from webhooks.shared.providers import PROVIDERS
from webhooks.shared.variables import IPNetwork, Topic, family, setting

DATABASE_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
BROKER_SCHEMES = ("redis", "rediss", "unix", "amqp", "amqps")
LOOPBACK = "127.0.0.1"
TRANSACTION_POOLING = "transaction"  # DATABASE_POOLER's one value
DEPLOY, RECONCILE, INGRESS, OBSERVE = (Topic.DEPLOY, Topic.RECONCILIATION, Topic.INGRESS,
                                      Topic.OBSERVABILITY)
NOTIFY = Topic.NOTIFICATIONS


def database_hosts(raw: str) -> tuple[str, str, list[str], str]:
    """A database URL's parts around its hosts, one or several as libpq writes them
    (`scheme://login@db1:5432,db2:5432/tail`): the scheme, the login with its "@" (or
    ""), the hosts, and what follows the first "/" (database and parameters)."""
    scheme, _, rest = raw.partition("://")
    netloc, _, tail = rest.partition("/")
    login, at, hosts = netloc.rpartition("@")
    return scheme, login + at, hosts.split(","), tail


def _database_url(raw: str) -> str:
    """One host, or several as libpq writes them (`db1:5432,db2:5432`), each checked."""
    raw = raw.strip()
    scheme, login, hosts, tail = database_hosts(raw)
    for host in hosts[1:]:
        v.split_url(f"{scheme}://{host}/")
    parts = v.split_url(f"{scheme}://{login}{hosts[0]}/{tail}")
    if parts.scheme not in DATABASE_SCHEMES:
        raise ValueError(f"scheme must be postgresql://, not {parts.scheme!r}")
    if not parts.path.strip("/") and "host=" not in parts.query:
        raise ValueError("no database name in the URL")
    return raw


def _broker_url(raw: str) -> str:
    raw = raw.strip()
    parts = v.split_url(raw)
    if parts.scheme not in BROKER_SCHEMES:
        raise ValueError(f"scheme must be redis:// or amqp://, not {parts.scheme!r}")
    if parts.scheme != "unix" and not parts.hostname:
        raise ValueError("no host in the URL")
    return raw


# Each provider's variables, from its record (shared/providers), asked for when read.
def _secret_variables() -> list[tuple[str, v.Variable]]:
    return [(name, v.Variable(record.secret_variable, s.secrets_parser(record), (),
                              "endpoint secrets", DEPLOY))
            for name, record in PROVIDERS.items()]


def _allowlist_variables() -> list[tuple[str, v.Variable]]:
    return [(name, v.Variable(f"{name.upper()}_ALLOWED_IPS", v.networks, (), "allowlist", INGRESS))
            for name in PROVIDERS]


def _api_base_variables() -> list[tuple[str, v.Variable]]:
    return [(name, v.Variable(f"{name.upper()}_API_BASE", v.http_url, None,
                              f"{record.title}'s API", RECONCILE))
            for name, record in PROVIDERS.items() if record.api_base]


@dataclass(frozen=True)
class Settings:
    # None when unset: every Procfile process then refuses to start (require_servers);
    # only `webhooks dev` and the tests start embedded servers instead.
    database_url: str | None = setting(
        "DATABASE_URL", _database_url, None,
        "`postgresql://user:pass@host:port/db`; several hosts as libpq writes them, "
        "`postgresql://user:pass@db1:5432,db2:5432/db?target_session_attrs=read-write`, "
        "and every new connection goes to the primary", DEPLOY,
        "required: unset, every Procfile process exits 1")
    # A pooler in transaction mode hands each transaction to any of its server sessions:
    # shared.db.connect_args then sends nothing that lives in a session (startup options,
    # server-side prepared statements); shared.pooler warns when one is seen unnamed.
    database_pooler: str | None = setting(
        "DATABASE_POOLER", v.choice(TRANSACTION_POOLING), None,
        "`transaction` when a pooler in transaction mode (PgBouncer, Supavisor) sits in "
        "front of Postgres (docs/several-hosts.md)", DEPLOY, "unset: direct connections")
    broker_url: str | None = setting(
        "BROKER_URL", _broker_url, None,
        "`redis://host:port/N` or `amqp://user:pass@host:port/vhost`", DEPLOY,
        "required (not by `release`)")
    port: int = setting("PORT", v.integer(1, 65535), 8000, "port of `web`", DEPLOY)
    secrets: Mapping[str, tuple[str, ...]] = family(
        _secret_variables, "<PROVIDER>_WEBHOOK_SECRET",
        "endpoint secrets, comma-separated for rotation (see Providers)", DEPLOY, "unset: 404")
    # The providers' named sources (shared/sources.py); the default ones are the secrets
    # above, the allowlists and the options below, and `sources` is the registry of both.
    named_sources: Mapping[str, tuple[s.Source, ...]] = s.named_sources_field()
    # The options each provider's record gives its default source a variable of
    # (STRIPE_API_KEY, STRIPE_LIVEMODE, PADDLE_API_KEY, GITHUB_TOKEN, GITHUB_HOOKS), by
    # provider and option key; each listed in its own topic's table.
    default_options: Mapping[str, Mapping[str, Any]] = s.default_options_field()
    tolerance_seconds: int = setting(
        "WEBHOOK_TOLERANCE_SECONDS", v.integer(1), 300,
        "signed timestamp tolerance, past or future", DEPLOY)
    max_body_bytes: int = setting("MAX_BODY_BYTES", v.integer(1), 2_097_152,
                                  "largest body (413 above)", DEPLOY)
    job_max_attempts: int = setting("JOB_MAX_ATTEMPTS", v.integer(1), 8,
                                    "attempts before `failed`", DEPLOY)
    job_retry_base_seconds: float = setting(
        "JOB_RETRY_BASE_SECONDS", v.number(), 2.0,
        "first retry delay (doubles, jitter, capped at 1 h)", DEPLOY)
    sweep_interval_seconds: float = setting(
        "SWEEP_INTERVAL_SECONDS", v.number(positive=True), 15.0, "clock's sweep period", DEPLOY)
    audit_interval_seconds: float = setting(
        "AUDIT_INTERVAL_SECONDS", v.number(), 3600.0,
        "how often the clock runs `webhooks audit` (violations logged at ERROR and on "
        "`/metrics`); `0`: never", DEPLOY)
    retention_days: int = setting("RETENTION_DAYS", v.integer(1), 30,
                                  "age of pruned finished events", DEPLOY)
    dedup_horizon_days: int = setting(
        "DEDUP_HORIZON_DAYS", v.integer(7), 90,
        "how long a redelivery is still a duplicate (Paddle replays for 90 days); "
        "never shorter than `RETENTION_DAYS`", DEPLOY)
    postmark_server_token: str | None = setting(
        "POSTMARK_SERVER_TOKEN", v.text, None, "Postmark server token", DEPLOY,
        "unset: emails go to the log")
    postmark_api_url: str = setting("POSTMARK_API_URL", v.http_url,
                                    "https://api.postmarkapp.com", "Postmark's API", DEPLOY)
    email_from: str = setting("EMAIL_FROM", v.email, "billing@example.com",
                              "sender address", DEPLOY)
    handler_modules: tuple[str, ...] = setting(
        "WEBHOOK_HANDLERS", v.modules, (),
        "the apps that run, comma-separated module paths, in the order their handlers run "
        "(the reference Stripe app: `webhooks.ledger`)", DEPLOY,
        "none: every event is recorded and its job completes with no effect (one WARNING at "
        "each process's start); `webhooks dev` runs `webhooks.ledger`")
    web_concurrency: int = setting("WEB_CONCURRENCY", v.integer(1), 2,
                                   "`web` server processes (`--workers` too)", DEPLOY)
    web_threads: int = setting("WEB_THREADS", v.integer(1), 4,
                               "app threads per `web` process (`--threads` too)", DEPLOY)
    # ingest/front.py `_Budget`: what bounds a `web` process's memory under large bodies.
    web_body_budget_bytes: int = setting(
        "WEB_BODY_BUDGET_BYTES", v.integer(1), 67_108_864,
        "bytes of request bodies one `web` process holds at once (read or waiting for an app "
        "thread); past it a body waits up to 1 s, then gets `503` with `Retry-After`, unread; "
        "at least twice `MAX_BODY_BYTES`", DEPLOY)
    worker_metrics_port: int = setting(
        "WORKER_METRICS_PORT", v.integer(0, 65535), 9191,
        "port of the Prometheus `/metrics` of a host's workers (`web` serves its own); "
        "`0`: none", DEPLOY)
    worker_metrics_host: str = setting(
        "WORKER_METRICS_HOST", v.address, LOOPBACK, "interface of the workers' `/metrics`", DEPLOY,
        "`127.0.0.1` (set `0.0.0.0` for a Prometheus on another host)")
    log_format: str = setting("LOG_FORMAT", v.choice("text", "json"), "text",
                              "`json` for production logs", DEPLOY)
    log_level: str = setting("LOG_LEVEL", v.choice("DEBUG", "INFO", "WARNING", "ERROR"),
                             "INFO", "`DEBUG`, `INFO`, `WARNING` or `ERROR`", DEPLOY)
    data_dir: Path = setting(
        "WEBHOOKS_DATA_DIR", v.path, Path(".webhooks"),
        "where `webhooks dev` keeps its embedded servers' data and dev secrets (the other "
        "commands find a running `webhooks dev` there)", DEPLOY)
    # The targets of the handlers' calls (ctx.queue_call): `stripe` and each CALL_<N>_URL.
    call_targets: Mapping[str, Target] = call_targets.targets_field()
    # Reconciliation: each provider's events API (its credentials are its sources' options).
    api_bases: Mapping[str, str] = family(
        _api_base_variables, "<PROVIDER>_API_BASE", "the provider's events API (a fake's, in "
        "tests)", RECONCILE, "the provider's: " + ", ".join(
            f"`{record.api_base}`" for record in PROVIDERS.values() if record.api_base))
    reconcile_interval_seconds: float = setting(
        "RECONCILE_INTERVAL_SECONDS", v.number(), 3600.0,
        "how often the clock reconciles each source with credentials; `0`: never", RECONCILE)
    reconcile_after_failover_hours: float = setting(
        "RECONCILE_AFTER_FAILOVER_HOURS", v.number(positive=True), 72.0,
        "after a database failover (a new timeline), how far back the clock reconciles each "
        "provider with credentials, whatever RECONCILE_INTERVAL_SECONDS says; and for as "
        "long after it, the outbox searches Postmark before every first send", RECONCILE)
    # Ingress: the networks each provider's deliveries may come from (absent: any), and how
    # many reverse proxies in front of `web` append to X-Forwarded-For.
    allowed_networks: Mapping[str, tuple[IPNetwork, ...]] = family(
        _allowlist_variables, "<PROVIDER>_ALLOWED_IPS",
        "addresses and CIDR ranges, IPv4 or IPv6, comma-separated, that the provider's "
        "deliveries may come from, at each of its sources without a list of its own; others "
        "get `403`", INGRESS, "unset: any address")
    trusted_proxies: int = setting(
        "TRUSTED_PROXIES", v.integer(0, 32), 0,
        "how many reverse proxies in front of `web` append to `X-Forwarded-For`", INGRESS,
        "`0`: the socket's peer address")
    # Observability: the OTEL_* variables this code reads (the SDK reads the others), and
    # the folder where a host's processes share their metrics.
    otel_endpoint: str | None = setting(
        "OTEL_EXPORTER_OTLP_ENDPOINT", v.http_url, None,
        "where `web` and `worker` send traces (OTLP over HTTP)", OBSERVE, "unset: no tracing")
    otel_traces_endpoint: str | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", v.http_url, None,
        "the same for traces alone, used as written", OBSERVE, "unset: no tracing")
    otel_service_name: str | None = setting(
        "OTEL_SERVICE_NAME", v.text, None, "the traces' service name", OBSERVE,
        "`webhooks-web`, `webhooks-worker`")
    prometheus_multiproc_dir: Path | None = setting(
        "PROMETHEUS_MULTIPROC_DIR", v.directory, None,
        "an existing folder where the processes of one `web` or `worker` share their metrics",
        OBSERVE, "unset: a new temporary folder each")

    # Notifications (shared/notifications.py, worker/notify.py): each channel is on when
    # its variable is set; the generic webhook needs its secret too.
    notify_slack_webhook_url: str | None = setting(
        "NOTIFY_SLACK_WEBHOOK_URL", v.http_url, None, "a Slack incoming webhook that hears "
        "every notification", NOTIFY, "unset: no Slack")
    notify_email_to: str | None = setting(
        "NOTIFY_EMAIL_TO", v.email, None, "the address that hears every notification, "
        "through Postmark as the receipts", NOTIFY, "unset: no email")
    notify_webhook_url: str | None = setting(
        "NOTIFY_WEBHOOK_URL", v.http_url, None, "a URL that receives every notification as "
        "a POST signed with Standard Webhooks headers", NOTIFY, "unset: no webhook")
    notify_webhook_secret: str | None = setting(
        "NOTIFY_WEBHOOK_SECRET", v.webhook_secret, None, "the webhook's signing secret, "
        "`whsec_` and base64; required with NOTIFY_WEBHOOK_URL", NOTIFY)
    notify_window_seconds: float = setting(
        "NOTIFY_WINDOW_SECONDS", v.number(positive=True), 300.0, "coalescing window: more of "
        "one kind for one source within it are one more message, with their count", NOTIFY)
    notify_failing_threshold: int = setting(
        "NOTIFY_FAILING_THRESHOLD", v.integer(1), 10, "failed job attempts of a source "
        "within the window that make it failing (`provider.failing`)", NOTIFY)
    console_url: str | None = setting(
        "CONSOLE_URL", v.http_url, None, "the console's address, for the links in "
        "messages", NOTIFY, "unset: messages name a `webhooks events` command")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        return cls(**v.read(cls, env))

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", self.data_dir.absolute())
        if self.web_body_budget_bytes < 2 * self.max_body_bytes:
            raise ConfigError("WEB_BODY_BUDGET_BYTES", f"must be at least twice MAX_BODY_BYTES "
                              f"({2 * self.max_body_bytes}), not {self.web_body_budget_bytes}")
        if self.notify_webhook_url and not self.notify_webhook_secret:
            raise ConfigError("NOTIFY_WEBHOOK_SECRET",
                              "must be set with NOTIFY_WEBHOOK_URL (the POSTs are signed)")

    @property
    def tracing(self) -> bool:
        """Whether traces are exported (an OTLP endpoint is set)."""
        return bool(self.otel_endpoint or self.otel_traces_endpoint)

    @property
    def transaction_pooler(self) -> bool:
        """Whether DATABASE_POOLER says a pooler in transaction mode is in front of Postgres."""
        return self.database_pooler == TRANSACTION_POOLING

    def secrets_for(self, provider: str) -> tuple[str, ...]:
        return self.secrets.get(provider, ())

    @property
    def sources(self) -> s.Sources:
        """Every configured source (one with secrets): the providers' default sources from
        their own variables, and the named ones. Built on each call (nothing is kept on the
        frozen settings, so `Settings(**settings.__dict__)` copies stay valid): a process
        builds it once at start and keeps it (the ingest: ingest/app.py)."""
        return s.build({provider: self.default_source(provider)
                        for provider in PROVIDERS if self.secrets_for(provider)},
                       self.named_sources, self.allowed_networks)

    def default_source(self, provider: str) -> s.Source:
        """The provider's default source, from the provider's own variables."""
        return s.default_source(provider, self.secrets_for(provider),
                                tuple(self.allowed_networks.get(provider, ())),
                                self.default_options.get(provider, {}))

    def api_base(self, provider: str) -> str | None:
        """The provider's events API (`<PROVIDER>_API_BASE`, else its record's)."""
        record = PROVIDERS.get(provider)
        return self.api_bases.get(provider) or (record.api_base if record else None)

    def require_servers(self, *, broker: bool = True) -> None:
        """MissingVariable unless DATABASE_URL (and BROKER_URL) are set. A deploy that
        forgot one must stop at once, never acknowledge webhooks into a local folder."""
        missing = [name for name, value in (("DATABASE_URL", self.database_url),
                                            ("BROKER_URL", self.broker_url if broker else ""))
                   if value is None]
        if missing:
            raise MissingVariable(missing[0], NO_EMBEDDED_SERVERS)


NO_EMBEDDED_SERVERS = "deployed processes never start an embedded server (only `webhooks dev` does)"


def markdown_table(topic: Topic) -> str:
    """The README's table of the topic's variables (the console's: webhooks.console.settings)."""
    return v.markdown_table(topic, Settings)
