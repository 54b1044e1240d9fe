"""The console's own settings, from the environment: CONSOLE_PORT, CONSOLE_USER,
CONSOLE_PASSWORD, CONSOLE_READONLY. A bad value raises ConfigError, one line naming the
variable, as shared.settings does for the core's variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from shared.errors import ConfigError, MissingVariable
from shared.settings import Settings

DEFAULT_PORT = 8001
DEFAULT_USER = "admin"
MIN_PASSWORD_LENGTH = 12  # the console faces the network with Basic auth
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class ConsoleSettings:
    password: str | None = None  # None: the console refuses to start (require_password)
    user: str = DEFAULT_USER
    port: int = DEFAULT_PORT
    readonly: bool = False
    # CONSOLE_SECRET_KEY: the CSRF tokens' key, the same on every console process; None:
    # derived from the password with scrypt (console.auth).
    secret_key: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ConsoleSettings:
        env = os.environ if env is None else env
        return cls(
            password=env.get("CONSOLE_PASSWORD") or None,
            user=_user(env.get("CONSOLE_USER", "")),
            port=_port(env.get("CONSOLE_PORT", "").strip()),
            readonly=_flag("CONSOLE_READONLY", env.get("CONSOLE_READONLY", "")),
            secret_key=env.get("CONSOLE_SECRET_KEY") or None,
        )

    def require_password(self) -> None:
        """MissingVariable unless CONSOLE_PASSWORD is set: the console never serves
        without credentials."""
        if not self.password:
            raise MissingVariable("CONSOLE_PASSWORD",
                                  "the console never runs without a password")
        if len(self.password) < MIN_PASSWORD_LENGTH:
            raise ConfigError("CONSOLE_PASSWORD", f"must be at least {MIN_PASSWORD_LENGTH} "
                                                  "characters")

    def check(self, settings: Settings) -> None:
        """Everything `serve` needs before it listens: DATABASE_URL and BROKER_URL (as every
        Procfile process), then CONSOLE_PASSWORD, and a port that is not the ingest's."""
        settings.require_servers()
        self.require_password()
        if self.port == settings.port:
            raise ConfigError("CONSOLE_PORT", f"must differ from PORT ({settings.port}), "
                                              "the ingest's port")


def _user(raw: str) -> str:
    user = raw.strip() or DEFAULT_USER
    if ":" in user:  # HTTP Basic cannot carry a user name with a colon
        raise ConfigError("CONSOLE_USER", "must not contain ':'")
    return user


def _port(raw: str) -> int:
    if not raw:
        return DEFAULT_PORT
    try:
        port = int(raw)
    except ValueError:
        raise ConfigError("CONSOLE_PORT", f"must be a whole number, not {raw!r}") from None
    if not 1 <= port <= 65535:
        raise ConfigError("CONSOLE_PORT", f"must be at least 1 and at most 65535, not {port}")
    return port


def _flag(variable: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(variable, f"must be 1 or 0, not {raw!r}")
