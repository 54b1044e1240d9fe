"""Through a real PgBouncer in transaction mode (tests/acceptance/harness.py
PrivatePgbouncer) in front of the test server: with DATABASE_POOLER=transaction the
engines keep nothing in a session, and without it the processes' start-up check
(shared/pooler.py) warns in one line, which a direct connection never gets."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests import processes
from tests.acceptance.harness import PrivatePgbouncer
from webhooks.shared import db, pooler
from webhooks.shared.settings import Settings

WARNING = "set DATABASE_POOLER=transaction"


def _pgbouncer(database_url: str, *, ignore_options: bool) -> Iterator[PrivatePgbouncer]:
    upstream = sa.make_url(database_url)
    host = upstream.host or str(upstream.query.get("host", "127.0.0.1"))
    if host.startswith("/"):
        # The embedded test server: a unix socket in a folder PgBouncer, which runs as
        # another OS user, may not enter, and a login by password the userlist lacks.
        pytest.skip("the test server listens on a private unix socket only")
    running = PrivatePgbouncer(host, upstream.port or 5432, pool_size=4,
                               ignore_options=ignore_options).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def pgbouncer(database_url: str) -> Iterator[PrivatePgbouncer]:
    """PgBouncer as it comes: a startup parameter it does not know is refused."""
    yield from _pgbouncer(database_url, ignore_options=False)


@pytest.fixture(scope="module")
def lenient_pgbouncer(database_url: str) -> Iterator[PrivatePgbouncer]:
    """PgBouncer told to drop libpq's `options` (ignore_startup_parameters), as guides
    for other clients suggest: connections succeed and nothing says the options are lost."""
    yield from _pgbouncer(database_url, ignore_options=True)


def _through(bouncer: PrivatePgbouncer, settings: Settings, **env: str) -> Settings:
    database = sa.make_url(settings.database_url or "").database or ""
    return Settings.from_env({"DATABASE_URL": bouncer.url(database),
                              "BROKER_URL": settings.broker_url or "", **env})


def _warnings(caplog: pytest.LogCaptureFixture, settings: Settings) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=pooler.__name__):
        pooler.warn_if_unnamed(settings)
    return [record.getMessage() for record in caplog.records]


def test_a_direct_connection_gets_no_warning(settings: Settings,
                                             caplog: pytest.LogCaptureFixture) -> None:
    assert _warnings(caplog, settings) == []


@pytest.mark.parametrize("bouncer", ["pgbouncer", "lenient_pgbouncer"])
def test_an_unnamed_pooler_in_transaction_mode_is_one_warning(
        bouncer: str, settings: Settings, caplog: pytest.LogCaptureFixture,
        request: pytest.FixtureRequest) -> None:
    """Refused startup options (PgBouncer's default), or, when it drops them, two client
    connections sharing one server session."""
    found = _warnings(caplog, _through(request.getfixturevalue(bouncer), settings))
    assert len(found) == 1 and WARNING in found[0], found
    shown = ("refuses startup options" if bouncer == "pgbouncer"
             else "transaction mode (two client connections ran in one server session")
    assert shown in found[0], found


@pytest.mark.parametrize("bouncer", ["pgbouncer", "lenient_pgbouncer"])
def test_a_named_pooler_gets_no_warning(bouncer: str, settings: Settings,
                                        caplog: pytest.LogCaptureFixture,
                                        request: pytest.FixtureRequest) -> None:
    named = _through(request.getfixturevalue(bouncer), settings,
                     DATABASE_POOLER="transaction")
    assert _warnings(caplog, named) == []


def test_web_warns_once_at_start_through_an_unnamed_pooler_and_not_direct(
        lenient_pgbouncer: PrivatePgbouncer, settings: Settings, tmp_path: Path) -> None:
    """The real process: `webhooks web`'s log has the one WARNING line through the pooler,
    none on a direct connection."""
    pooled = _through(lenient_pgbouncer, settings)
    for name, url in (("pooled", pooled.database_url), ("direct", settings.database_url)):
        log = tmp_path / f"{name}.log"
        env = {"DATABASE_URL": url or "", "BROKER_URL": settings.broker_url or "",
               "TMPDIR": str(tmp_path)}
        with processes.web_server(env, log, workers=1):
            pass
        lines = [line for line in log.read_text().splitlines() if WARNING in line]
        assert len(lines) == (1 if name == "pooled" else 0), log.read_text()
        if lines:
            assert "WARNING" in lines[0]


def test_with_database_pooler_the_engines_keep_nothing_in_a_session(
        pgbouncer: PrivatePgbouncer, settings: Settings) -> None:
    """One statement run many times on one client connection whose transactions land in
    different server sessions: psycopg would prepare it in one session after
    prepare_threshold runs, and the next transaction, in another session, would fail
    (prepared statement "_pg3_0" does not exist). And the connections carry no startup
    options (PgBouncer would refuse them), yet get the server settings: migration 0010 set
    them for the role."""
    named = _through(pgbouncer, settings, DATABASE_POOLER="transaction")
    engine = db.create_engine(named, pool_size=2)
    statement = sa.text("SELECT pg_backend_pid() + CAST(:n AS int) - :n")
    try:
        with engine.connect() as one, engine.connect() as two:
            backends = _interleaved(one, two, statement)
            timeout = one.execute(sa.text("SHOW idle_in_transaction_session_timeout"))
            assert timeout.scalar_one() == "20s"
            one.commit()
    finally:
        engine.dispose()
    assert len(backends) > 1  # the one connection's transactions did change sessions


def _interleaved(one: sa.Connection, two: sa.Connection, statement: sa.TextClause) -> set[int]:
    """Ten rounds: `one` runs the statement; `two` holds the session `one` just gave back
    while `one` runs it again, in another session. The server sessions `one` ran in."""
    seen = set()
    for n in range(10):
        for holder in (None, two):
            if holder is not None:
                holder.execute(statement, {"n": n})  # an open transaction: its session
            seen.add(int(one.execute(statement, {"n": n}).scalar_one()))
            one.commit()
            if holder is not None:
                holder.commit()
    return seen

