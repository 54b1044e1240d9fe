"""webhooks.shared.db.connect_args: a direct connection carries the server settings as startup
options; behind a pooler in transaction mode (DATABASE_POOLER=transaction) a connection
carries nothing that lives in a server session. DATABASE_POOLER takes `transaction` only."""

from __future__ import annotations

import pytest

from webhooks.shared import db
from webhooks.shared.errors import ConfigError
from webhooks.shared.settings import Settings

THIS_END = {"connect_timeout", "application_name", "keepalives", "keepalives_idle",
            "keepalives_interval", "keepalives_count", "tcp_user_timeout"}


def test_a_direct_connection_sends_every_server_setting_as_a_startup_option() -> None:
    args = db.connect_args(Settings.from_env({}))
    assert set(args) == THIS_END | {"options"}
    assert args["options"].split() == [part for name, value in db.SERVER_SETTINGS.items()
                                       for part in ("-c", f"{name}={value}")]


def test_behind_a_transaction_pooler_no_startup_options_and_no_prepared_statements() -> None:
    """PgBouncer refuses the `options` startup parameter, and a statement psycopg prepared
    in one server session is unknown to the next transaction's (prepare_threshold None:
    never prepared). The role's settings (migration 0010) stand in for the options."""
    args = db.connect_args(Settings.from_env({"DATABASE_POOLER": "transaction"}))
    assert set(args) == THIS_END | {"prepare_threshold"}
    assert args["prepare_threshold"] is None


def test_both_keep_this_ends_keepalives_and_user_timeout() -> None:
    direct = db.connect_args(Settings.from_env({}))
    pooled = db.connect_args(Settings.from_env({"DATABASE_POOLER": "transaction"}))
    assert {name: direct[name] for name in THIS_END} == {name: pooled[name] for name in THIS_END}
    assert pooled["tcp_user_timeout"] == db.USER_TIMEOUT_MS and pooled["keepalives"] == 1


@pytest.mark.parametrize(("raw", "pooled"), [("transaction", True), ("Transaction", True),
                                             ("", False), ("  ", False)])
def test_database_pooler_is_transaction_or_unset(raw: str, pooled: bool) -> None:
    settings = Settings.from_env({"DATABASE_POOLER": raw})
    assert settings.transaction_pooler is pooled
    assert settings.database_pooler == ("transaction" if pooled else None)


@pytest.mark.parametrize("raw", ["session", "statement", "pgbouncer", "1"])
def test_any_other_pooler_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(ConfigError, match=rf"^DATABASE_POOLER: must be one of transaction, "
                                          rf"not '{raw}'$"):
        Settings.from_env({"DATABASE_POOLER": raw})


def test_the_urls_own_options_are_sent_before_the_server_settings() -> None:
    """DATABASE_URL's `?options=` (a search_path: where the tables live) is kept: psycopg
    sends connect_args' `options` in place of the URL's, so they are merged here; where
    both set one name, the server setting (the later `-c`) holds."""
    url = ("postgresql://u@db/app?sslmode=prefer&options=-csearch_path%3Dwebhooks%2Cpublic"
           "%20-c%20idle_in_transaction_session_timeout%3D0")
    args = db.connect_args(Settings.from_env({"DATABASE_URL": url}))
    parts = args["options"].split()
    assert parts[:3] == ["-csearch_path=webhooks,public", "-c",
                         "idle_in_transaction_session_timeout=0"]
    assert parts[3:] == db.connect_args(Settings.from_env({}))["options"].split()
    given = db.connect_args(Settings.from_env({}), url="postgresql+psycopg://u@db/app"
                            "?host=a&host=b&options=-csearch_path%3Dx")
    assert given["options"].startswith("-csearch_path=x -c ")


def test_behind_a_transaction_pooler_the_urls_options_are_refused_at_start() -> None:
    from webhooks.shared import pooler

    url = "postgresql://u@pooler/app?options=-csearch_path%3Dwebhooks"
    named = Settings.from_env({"DATABASE_URL": url, "DATABASE_POOLER": "transaction"})
    line = pooler.url_options_refused(named)
    assert line is not None and "(-csearch_path=webhooks)" in line and "ALTER ROLE" in line
    assert pooler.url_options_refused(Settings.from_env({"DATABASE_URL": url})) is None
    assert pooler.url_options_refused(Settings.from_env(
        {"DATABASE_URL": "postgresql://u@pooler/app", "DATABASE_POOLER": "transaction"})) is None
