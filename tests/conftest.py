"""Test infrastructure: a real Postgres and a real broker.

Postgres: DATABASE_URL if set (CI sets it to the machine's server), else an embedded
pgserver started for this run. Each test session creates its own database, migrated with
Alembic; each test starts from empty tables. Broker: BROKER_URL if set, else an embedded
Redis started for this run. The embedded servers a run starts end with it, unless
WEBHOOKS_TEST_KEEP_SERVERS=1 asks to keep them (in one folder under the temp folder) for
the next run's speed.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.emptying import truncate
from webhooks.shared import db
from webhooks.shared.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
TABLES = ("outbox", "ledger_entries", "accounts", "subscriptions", "webhook_duplicates",
          "reconcile_runs", "paused_providers", "audit_results", "jobs", "webhook_events",
          "failover_reconciles", "database_timelines", "notification_deliveries",
          "notifications", "notification_windows", "notification_health", "clock_heartbeats",
          "event_search", "calls", "webhook_dedup")
KEEP_SERVERS = "WEBHOOKS_TEST_KEEP_SERVERS"


def keep_servers() -> bool:
    return os.environ.get(KEEP_SERVERS, "") not in ("", "0")


@functools.cache
def embedded_dir() -> Path:
    """The folder of this run's embedded servers: its own, or the kept one."""
    if keep_servers():
        kept = Path(tempfile.gettempdir()) / "webhooks-test-embedded"
        kept.mkdir(exist_ok=True)
        return kept
    return Path(tempfile.mkdtemp(prefix="webhooks-test-embedded-"))


_started: set[str] = set()  # the embedded servers this run started: "postgres", "broker"


def server_url() -> str:
    raw = os.environ.get("DATABASE_URL")
    if raw:
        return db.sqlalchemy_url(raw)
    from webhooks import embedded

    _started.add("postgres")
    return db.sqlalchemy_url(embedded.start_postgres(embedded_dir()))


def broker_url() -> str:
    raw = os.environ.get("BROKER_URL")
    if raw:
        return raw
    from webhooks import embedded

    _started.add("broker")
    return embedded.start_broker(embedded_dir())


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the embedded servers this run started (unless they are to be kept)."""
    if not _started or keep_servers():
        return
    from webhooks import embedded

    folder = embedded_dir()
    embedded.stop_broker(folder)
    embedded.stop_postgres(folder)
    shutil.rmtree(folder, ignore_errors=True)


APPS = ("webhooks.ledger",)  # the apps whose tables the tests use (TABLES)


def migrate(url: str, apps: tuple[str, ...] = APPS) -> None:
    """The core's migrations, then those of `apps` (as `webhooks migrate` does with
    WEBHOOK_HANDLERS naming them: webhooks/migrate.py)."""
    from webhooks import migrate as migrations

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    # Not in a transaction of ours: the migrations manage theirs (0003 builds its indexes
    # CONCURRENTLY, outside one).
    with engine.connect() as conn:
        migrations.upgrade(conn, apps)
    engine.dispose()


def create_database(name: str) -> str:
    """Create database `name` on the test server and return its SQLAlchemy URL."""
    url = sa.make_url(server_url())
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def drop_database(name: str) -> None:
    url = sa.make_url(server_url())
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    name = f"webhooks_test_{secrets.token_hex(4)}"
    url = create_database(name)
    migrate(url)
    yield url
    drop_database(name)


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    engine = sa.create_engine(database_url, pool_size=10, max_overflow=10)
    yield engine
    engine.dispose()


@pytest.fixture()
def clean_db(engine: Engine) -> Engine:
    truncate(engine, TABLES)
    return engine


@pytest.fixture()
def fresh_database() -> Iterator[tuple[str, Engine]]:
    """A database of its own, not migrated (the test migrates it as it needs), and an
    engine on it; dropped after the test."""
    name = f"webhooks_test_fresh_{secrets.token_hex(4)}"
    url = create_database(name)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    yield url, engine
    engine.dispose()
    drop_database(name)


STRIPE_SECRET = "whsec_test_secret"


@pytest.fixture()
def settings(database_url: str, tmp_path: Path) -> Settings:
    """Settings pointing at the test database and broker, with short retries."""
    return Settings.from_env(
        {
            "DATABASE_URL": database_url,
            "BROKER_URL": broker_url(),
            "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
            "JOB_RETRY_BASE_SECONDS": "0",
            "JOB_MAX_ATTEMPTS": "3",
            "WEBHOOKS_DATA_DIR": str(tmp_path / "data"),
            "WEBHOOK_HANDLERS": ",".join(TEST_APPS),
        }
    )


# The apps the tests run in their own process: the reference app, and the handlers the
# tests declare (tests/handlers_for_tests.py and the test modules' own; tests/apps/ holds
# apps a test names itself). The processes the tests start run the reference app unless a
# test names others (TEST_PROCESS_APPS).
TEST_APPS = ("webhooks.ledger", "tests.handlers_for_tests", "tests.unit", "tests.integration",
             "tests.acceptance")
TEST_PROCESS_APPS = "webhooks.ledger"
os.environ.setdefault("WEBHOOK_HANDLERS", TEST_PROCESS_APPS)


@pytest.fixture(autouse=True)
def _apps() -> None:
    """Each test starts with the test apps running (shared.hooks.load), whatever apps an
    earlier test ran."""
    from webhooks.shared import hooks

    hooks.load(TEST_APPS)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False,
                     help="also run the ten-minute long run (tests/acceptance/test_soak.py)")


@pytest.fixture(autouse=True)
def _full_size_claims() -> None:
    """worker.jobs.PACE learns how long jobs take in this process: reset it, so that one
    test's slow handlers do not shrink the next test's claims."""
    from webhooks.worker import jobs

    jobs.PACE.seconds_per_job = 1e-9
