"""The console's own settings, from the environment, each variable declared with its field
(shared.variables): CONSOLE_PORT, CONSOLE_HOST, CONSOLE_USER, CONSOLE_PASSWORD,
CONSOLE_READONLY, CONSOLE_SECRET_KEY. A bad value raises ConfigError, one line naming the
variable, as shared.settings does for the core's variables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from webhooks.shared import variables as v
from webhooks.shared.errors import ConfigError, MissingVariable, UnusableVariable
from webhooks.shared.settings import LOOPBACK, Settings
from webhooks.shared.variables import Topic, setting

MIN_PASSWORD_LENGTH = 12  # the console faces the network with Basic auth
C = Topic.CONSOLE


def _user(raw: str) -> str:
    user = raw.strip()
    if ":" in user:  # HTTP Basic cannot carry a user name with a colon
        raise ValueError("must not contain ':'")
    return user


@dataclass(frozen=True)
class ConsoleSettings:
    password: str | None = setting(
        "CONSOLE_PASSWORD", v.text, None, "HTTP Basic password, asked on every page; at "
        f"least {MIN_PASSWORD_LENGTH} characters", C,
        "no default: without a password `console` exits 1 naming it")
    user: str = setting("CONSOLE_USER", _user, "admin", "HTTP Basic user", C)
    port: int = setting("CONSOLE_PORT", v.integer(1, 65535), 8001,
                        "port of `console` (must differ from `PORT`)", C)
    host: str = setting("CONSOLE_HOST", v.address, LOOPBACK,
                        "interface `console` listens on (`--host` too); open it wider only "
                        "behind a TLS proxy", C)
    readonly: bool = setting("CONSOLE_READONLY", v.flag, False,
                             "`1`: every page, nothing to press, every POST answered 403", C,
                             "`0`")
    secret_key: str | None = setting(
        "CONSOLE_SECRET_KEY", v.text, None, "the CSRF tokens' key, the same on every console "
        "process", C, "derived from `CONSOLE_PASSWORD` with scrypt")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ConsoleSettings:
        return cls(**v.read(cls, env))

    def require_password(self) -> None:
        """MissingVariable unless CONSOLE_PASSWORD is set: the console never serves
        without credentials."""
        if not self.password:
            raise MissingVariable("CONSOLE_PASSWORD",
                                  "the console never runs without a password")
        if len(self.password) < MIN_PASSWORD_LENGTH:
            raise UnusableVariable("CONSOLE_PASSWORD",
                                   f"must be at least {MIN_PASSWORD_LENGTH} characters")

    def check(self, settings: Settings) -> None:
        """Everything `serve` needs before it listens: DATABASE_URL and BROKER_URL (as every
        Procfile process), then CONSOLE_PASSWORD, and a port that is not the ingest's."""
        settings.require_servers()
        self.require_password()
        if self.port == settings.port:
            raise ConfigError("CONSOLE_PORT", f"must differ from PORT ({settings.port}), "
                                              "the ingest's port")


def markdown_table() -> str:
    """The README's table of the console's variables."""
    return v.markdown_table(C, ConsoleSettings)
