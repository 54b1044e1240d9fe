"""webhooks.shared.db's statements straight through psycopg, on a real Postgres."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from webhooks.shared import db
from webhooks.shared.settings import Settings

NUMBERS = sa.text("SELECT n, n * 2 AS double FROM generate_series(1, :last) AS n")


class Number(NamedTuple):
    n: int
    double: int


def test_fetch_all_in_returns_typed_rows(clean_db: Engine) -> None:
    with clean_db.connect() as conn:
        rows = db.fetch_all_in(conn, NUMBERS, {"last": 3}, Number)
        assert rows == [Number(1, 2), Number(2, 4), Number(3, 6)]
        assert isinstance(rows[0], Number)
        assert db.fetch_all_in(conn, sa.text("SELECT 1 AS n, 2 AS double WHERE false"), {},
                               Number) == []


def test_fetch_scalars_in_returns_the_first_column(clean_db: Engine) -> None:
    with clean_db.connect() as conn:
        assert db.fetch_scalars_in(conn, NUMBERS, {"last": 3}) == [1, 2, 3]


def test_execute_in_returns_the_row_count(clean_db: Engine) -> None:
    with clean_db.begin() as conn:
        conn.execute(sa.text("CREATE TEMP TABLE t (n int) ON COMMIT DROP"))
        assert db.execute_in(conn, sa.text("INSERT INTO t SELECT generate_series(1, 5)"), {}) == 5
        assert db.execute_in(conn, sa.text("UPDATE t SET n = 0 WHERE n > :n"), {"n": 3}) == 2


def test_errors_come_out_as_sqlalchemy_errors(clean_db: Engine) -> None:
    with clean_db.connect() as conn, pytest.raises(sa.exc.DataError):
        db.execute_in(conn, sa.text("SELECT 1 / :zero"), {"zero": 0})


def test_an_error_names_the_statement_never_its_values(clean_db: Engine,
                                                        settings: Settings) -> None:
    """Errors reach the logs at WARNING and ERROR and a job's last_error; the values bound
    to the statement (a payload, an email) are customer data. (What Postgres itself says,
    such as the key of a unique violation, is kept: it is what an operator needs.)"""
    engine = db.create_engine(settings, pool_size=1)
    try:
        with engine.connect() as conn, pytest.raises(sa.exc.DBAPIError) as raised:
            conn.execute(sa.text("SELECT CAST(:email AS text), 1 / 0"),
                         {"email": "someone.private@example.org"})
    finally:
        engine.dispose()
    assert "division by zero" in str(raised.value) and "SELECT CAST" in str(raised.value)
    assert "someone.private" not in str(raised.value)


def test_the_server_settings_hold_without_startup_options(engine: Engine) -> None:
    """Migration 0010 makes shared.db.SERVER_SETTINGS the role's defaults in the database: a
    session that sends no startup options (through a pooler in transaction mode, which
    drops them) still gets every one, so the server ends a cut-off client's sessions."""
    # The test engine sends no options; it connects as the role the migrations ran as.
    # pg_settings.setting is in the parameter's own unit, as SERVER_SETTINGS writes it.
    with engine.connect() as conn:
        over_socket = _over_unix_socket(conn)
        rows = conn.execute(sa.text("SELECT name, setting, source FROM pg_settings "
                                    "WHERE name = ANY(:names)"),
                            {"names": list(db.SERVER_SETTINGS)}).all()
    assert {row.name: (row.setting, row.source) for row in rows} == {
        name: ("0" if over_socket and name in TCP_ONLY else value, "database user")
        for name, value in db.SERVER_SETTINGS.items()}


# Postgres ignores these on a unix socket (the embedded test server's), where they read 0.
TCP_ONLY = frozenset({"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
                      "tcp_user_timeout"})


def _over_unix_socket(conn: sa.Connection) -> bool:
    return bool(conn.execute(sa.text("SELECT inet_server_addr() IS NULL")).scalar_one())


def test_connections_probe_a_silent_server(settings: Settings) -> None:
    """The engine's connections carry libpq keepalives and a user timeout, and the
    server-side settings as startup options (direct connections)."""
    engine = db.create_engine(settings, pool_size=1)
    try:
        with engine.connect() as conn:
            info = conn.connection.driver_connection.info  # type: ignore[union-attr]
            params = info.get_parameters()
            assert params["keepalives"] == "1"
            assert params["tcp_user_timeout"] == str(db.USER_TIMEOUT_MS)
            assert conn.execute(sa.text("SHOW tcp_keepalives_idle")).scalar_one() == (
                "0" if _over_unix_socket(conn) else str(db.KEEPALIVE_IDLE))
            assert conn.execute(sa.text("SHOW idle_in_transaction_session_timeout")
                                ).scalar_one() != "0"
    finally:
        engine.dispose()


BACKEND = sa.text("SELECT pg_backend_pid()")
POOLED = 4


@pytest.mark.parametrize("autocommit", [False, True], ids=["in_a_transaction", "fetch_one"])
def test_a_lost_server_takes_the_whole_pool_with_it(settings: Settings, clean_db: Engine,
                                                    autocommit: bool) -> None:
    """A failover ends every session of the old primary at once. The first statement that
    finds its connection gone fails (DatabaseUnavailable: a worker's wake-up is dropped,
    web answers 503); the pool's other connections, made before, are replaced at their
    next checkout instead of each failing one more statement (one more dropped wake-up
    each, with only the clock's next sweep to pick their jobs up)."""
    engine = db.create_engine(settings, pool_size=POOLED, autocommit=autocommit)

    def backend() -> int:
        if autocommit:
            row = db.fetch_one(engine, BACKEND, {})
            assert row is not None
            return int(row[0])
        with engine.begin() as conn:
            return int(db.fetch_scalars_in(conn, BACKEND, {})[0])

    try:
        held = [engine.connect() for _ in range(POOLED)]  # the pool makes POOLED connections
        for conn in held:
            conn.close()
        before = {backend() for _ in range(POOLED)}
        assert len(before) == POOLED
        with clean_db.connect() as admin:
            admin.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE pid = ANY(:pids)"), {"pids": sorted(before)})
            admin.commit()
        with pytest.raises(db.DatabaseUnavailable):
            backend()
        after = {backend() for _ in range(POOLED)}  # none fails
        assert not after & before
    finally:
        engine.dispose()
