"""CONSOLE_* variables: defaults, and one line naming the variable for a bad or missing
one; `check` names DATABASE_URL first, then CONSOLE_PASSWORD, then a port clash."""

from __future__ import annotations

import pytest

from webhooks.console.auth import Guard
from webhooks.console.settings import ConsoleSettings
from webhooks.shared.errors import ConfigError, MissingVariable
from webhooks.shared.settings import Settings

SERVERS = {"DATABASE_URL": "postgresql://u@h/db", "BROKER_URL": "redis://h/0"}


def test_defaults() -> None:
    settings = ConsoleSettings.from_env({})
    assert (settings.port, settings.user, settings.password, settings.readonly) == \
        (8001, "admin", None, False)


@pytest.mark.parametrize(("variable", "value"), [
    ("CONSOLE_PORT", "abc"), ("CONSOLE_PORT", "0"), ("CONSOLE_PORT", "70000"),
    ("CONSOLE_READONLY", "maybe"), ("CONSOLE_USER", "ad:min"),
])
def test_a_bad_value_is_one_line_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        ConsoleSettings.from_env({variable: value})
    assert raised.value.variable == variable
    assert str(raised.value).startswith(f"{variable}: ") and "\n" not in str(raised.value)


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_readonly(value: str) -> None:
    assert ConsoleSettings.from_env({"CONSOLE_READONLY": value}).readonly


def test_check_names_database_url_then_the_password_then_the_port() -> None:
    with pytest.raises(MissingVariable, match=r"^DATABASE_URL"):
        ConsoleSettings().check(Settings.from_env({}))
    with pytest.raises(MissingVariable, match=r"^BROKER_URL"):
        ConsoleSettings().check(Settings.from_env({"DATABASE_URL": "postgresql://u@h/db"}))
    with pytest.raises(MissingVariable, match=r"^CONSOLE_PASSWORD"):
        ConsoleSettings().check(Settings.from_env(SERVERS))
    with pytest.raises(ConfigError, match=r"^CONSOLE_PORT"):
        ConsoleSettings(password="a long password", port=8000).check(Settings.from_env(SERVERS))
    ConsoleSettings(password="a long password").check(Settings.from_env(SERVERS))


def test_no_console_without_a_password() -> None:
    with pytest.raises(MissingVariable, match=r"^CONSOLE_PASSWORD"):
        Guard(ConsoleSettings())


def test_a_token_is_bound_to_the_user_and_the_password() -> None:
    guard = Guard(ConsoleSettings(password="a long password"))
    token = guard.token()
    assert guard.valid_token(token)
    assert Guard(ConsoleSettings(password="a long password")).valid_token(token)  # another process
    assert not Guard(ConsoleSettings(password="a long password2")).valid_token(token)
    assert not Guard(ConsoleSettings(password="a long password", user="ops")).valid_token(token)
    assert not guard.valid_token(token[:-2] + "xx")
    assert not guard.valid_token(None)
