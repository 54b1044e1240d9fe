"""Where the tables live (SPEC "Apps"): a search_path given in DATABASE_URL (libpq's
`options`) or set on the database role is where `webhooks migrate` creates the system's
tables and version tables, its first schema created if missing, and where every process
reads them; an app's table kept in `public` is found there. Behind a pooler in transaction
mode only the role's setting reaches the sessions: the URL's options stop the processes
at start with one line (docs/several-hosts.md "Where the tables live")."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa

from tests import factories, processes
from tests.acceptance.harness import PrivatePgbouncer
from tests.conftest import STRIPE_SECRET, broker_url, create_database, drop_database

SEARCH_PATH = "webhooks,public"
URL_OPTIONS = "options=-csearch_path%3Dwebhooks%2Cpublic"

# An app whose one table lives in `public`, apart from the system's (its revision names the
# schema); its handler finds it through the search_path's second entry.
APP = '''
import sqlalchemy as sa

from webhooks import JobContext, handler

MIGRATIONS = "migrations"


@handler("stripe", "invoice.paid")
def note(ctx: JobContext) -> str:
    ctx.conn.execute(sa.text("INSERT INTO paid_invoices (event_id) VALUES (:id)"),
                     {"id": ctx.event_id})
    return "noted"
'''

REVISION = '''
import sqlalchemy as sa
from alembic import op

revision = "paid_0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("paid_invoices", sa.Column("event_id", sa.Text(), primary_key=True),
                    schema="public")


def downgrade() -> None:
    op.drop_table("paid_invoices", schema="public")
'''


@pytest.fixture()
def database() -> Iterator[tuple[str, str, sa.Engine]]:
    """A new database (its name, its URL), and an engine on it with the server's default
    search_path, to look at where things are."""
    name = f"webhooks_test_schemas_{secrets.token_hex(4)}"
    url = create_database(name)
    if sa.make_url(url).get_backend_name() != "postgresql" or not sa.make_url(url).host:
        drop_database(name)
        pytest.skip("the test server listens on a unix socket only")
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    yield name, url, engine
    engine.dispose()
    drop_database(name)


@pytest.fixture()
def app(tmp_path: Path) -> str:
    """The app's module, in a folder of its own (on PYTHONPATH for the commands)."""
    module = f"paid_app_{secrets.token_hex(3)}"
    folder = tmp_path / "app"
    (folder / "migrations").mkdir(parents=True)
    (folder / f"{module}.py").write_text(APP)
    (folder / "migrations" / "paid_0001.py").write_text(REVISION)
    return module


def _env(url: str, module: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(tmp_path / "app"), os.environ.get("PYTHONPATH", "")])
    return {"DATABASE_URL": url, "BROKER_URL": broker_url(), "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
            "WEBHOOK_HANDLERS": module, "PYTHONPATH": path,
            "WORKER_METRICS_PORT": "0", "SWEEP_INTERVAL_SECONDS": "1", "TMPDIR": str(tmp_path),
            **extra}


def _migrate(url: str, module: str, tmp_path: Path) -> str:
    env = {**os.environ, **_env(url, module, tmp_path)}
    result = subprocess.run([sys.executable, "-m", "webhooks", "migrate"], cwd=processes.ROOT,
                            env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _scalar(engine: sa.Engine, sql: str) -> object:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql)).scalar()


def _schema_of(engine: sa.Engine, table: str) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(
            "SELECT schemaname FROM pg_tables WHERE tablename = :t ORDER BY 1"), {"t": table})
            .scalars())


def _deliver_through_the_processes(env: dict[str, str], engine: sa.Engine,
                                   tmp_path: Path) -> None:
    """Real `web`, `worker` and `clock`: a signed delivery is acknowledged, applied by the
    app (its row in public.paid_invoices) and the clock sweeps."""
    log = tmp_path / "processes.log"
    worker = processes.start(["worker", "--processes", "1", "--threads", "2"], env, log)
    clock = processes.start(["clock"], env, log)
    try:
        with processes.web_server(env, log, workers=1) as base:
            body = json.dumps(factories.stripe_event(
                "invoice.paid", factories.invoice("in_schema"), event_id="evt_schema")).encode()
            answer = requests.post(f"{base}/webhooks/stripe", data=body, timeout=10, headers={
                "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})
            assert answer.status_code == 200, answer.text + log.read_text()
            try:
                processes.wait_until(lambda: _scalar(
                    engine, "SELECT count(*) FROM webhooks.jobs WHERE status = 'done'") == 1,
                    timeout=60)
                processes.wait_until(lambda: _scalar(
                    engine, "SELECT count(*) FROM webhooks.clock_heartbeats"), timeout=60)
            except TimeoutError:
                raise AssertionError(log.read_text()) from None
    finally:
        processes.stop(worker)
        processes.stop(clock)
    assert "does not exist" not in log.read_text(), log.read_text()
    assert _scalar(engine, "SELECT event_id FROM public.paid_invoices") == "evt_schema"
    assert _scalar(engine, "SELECT outcome FROM webhooks.jobs") == "noted"


def _tables_are_where_the_search_path_says(engine: sa.Engine, module: str) -> None:
    for table in ("webhook_events", "jobs", "clock_heartbeats", "alembic_version",
                  f"alembic_version_{module}"):
        assert _schema_of(engine, table) == ["webhooks"], table
    assert _schema_of(engine, "paid_invoices") == ["public"]


def test_a_search_path_in_the_url_holds_for_migrate_and_every_process(
        database: tuple[str, str, sa.Engine], app: str, tmp_path: Path) -> None:
    """DATABASE_URL's `?options=-csearch_path%3Dwebhooks%2Cpublic`: the schema is created by
    `migrate`, the system's tables and version tables go there, and web, worker and clock
    find them (before, the processes sent their own startup options in place of the URL's:
    `relation "webhook_events" does not exist`)."""
    _, url, engine = database
    assert not _scalar(engine, "SELECT count(*) FROM pg_namespace WHERE nspname = 'webhooks'")
    with_path = f"{url}?{URL_OPTIONS}"
    _migrate(with_path, app, tmp_path)
    _tables_are_where_the_search_path_says(engine, app)
    assert f"{app}: at paid_0001 (nothing to apply)" in _migrate(with_path, app, tmp_path)
    _deliver_through_the_processes(_env(with_path, app, tmp_path), engine, tmp_path)


def _set_on_the_role(engine: sa.Engine, name: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(f'ALTER ROLE CURRENT_USER IN DATABASE "{name}" '
                             f"SET search_path = {SEARCH_PATH}"))


def test_a_search_path_on_the_role_holds_for_migrate_and_every_process(
        database: tuple[str, str, sa.Engine], app: str, tmp_path: Path) -> None:
    name, url, engine = database
    _set_on_the_role(engine, name)
    _migrate(url, app, tmp_path)
    looking = sa.create_engine(f"{url}?options=-csearch_path%3Dpublic", poolclass=sa.pool.NullPool)
    try:
        _tables_are_where_the_search_path_says(looking, app)
        _deliver_through_the_processes(_env(url, app, tmp_path), looking, tmp_path)
    finally:
        looking.dispose()


@pytest.fixture()
def pgbouncer(database: tuple[str, str, sa.Engine]) -> Iterator[PrivatePgbouncer]:
    """PgBouncer in transaction mode as it comes (tests/integration/test_pooler.py)."""
    upstream = sa.make_url(database[1])
    running = PrivatePgbouncer(upstream.host or "127.0.0.1", upstream.port or 5432,
                               pool_size=4).start()
    try:
        yield running
    finally:
        running.stop()


def test_behind_a_transaction_pooler_the_roles_search_path_holds(
        database: tuple[str, str, sa.Engine], app: str, tmp_path: Path,
        pgbouncer: PrivatePgbouncer) -> None:
    """`migrate` on a direct connection, the processes through PgBouncer
    (DATABASE_POOLER=transaction): the role's search_path reaches every server session the
    pooler opens."""
    name, url, engine = database
    _set_on_the_role(engine, name)
    _migrate(url, app, tmp_path)
    env = _env(pgbouncer.url(name), app, tmp_path, DATABASE_POOLER="transaction")
    looking = sa.create_engine(f"{url}?options=-csearch_path%3Dpublic", poolclass=sa.pool.NullPool)
    try:
        _deliver_through_the_processes(env, looking, tmp_path)
    finally:
        looking.dispose()
    assert pgbouncer.transactions(name) > 0


def test_behind_a_transaction_pooler_the_urls_options_stop_each_process_with_one_line(
        app: str, tmp_path: Path) -> None:
    """PgBouncer would refuse every connection (`unsupported startup parameter: options`),
    a pooler set to ignore them would drop the search_path: each process says so at start
    instead, naming DATABASE_URL and the role's setting, exit 2."""
    url = f"postgresql://postgres@127.0.0.1:{processes.free_port()}/db?{URL_OPTIONS}"
    env = {**os.environ, **_env(url, app, tmp_path, DATABASE_POOLER="transaction")}
    for command in ("web", "worker", "clock", "console"):
        result = subprocess.run([sys.executable, "-m", "webhooks", command],
                                env={**env, "CONSOLE_PASSWORD": "a-console-password-1"},
                                cwd=processes.ROOT, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, (command, result.stdout + result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("webhooks: DATABASE_URL: its options (-csearch_path=webhooks,"
                               "public) are startup options"), line
        assert "ALTER ROLE" in line and "DATABASE_POOLER=transaction" in line


def test_migrate_names_a_search_path_schema_it_cannot_create_in_one_line(
        database: tuple[str, str, sa.Engine], app: str, tmp_path: Path) -> None:
    _, url, engine = database
    role = f"webhooks_nocreate_{secrets.token_hex(3)}"
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE ROLE "{role}" LOGIN'))
    try:
        limited = sa.make_url(url).set(username=role).render_as_string(hide_password=False)
        env = {**os.environ, **_env(f"{limited}?{URL_OPTIONS}", app, tmp_path)}
        result = subprocess.run([sys.executable, "-m", "webhooks", "migrate"],
                                cwd=processes.ROOT, env=env, capture_output=True, text=True,
                                timeout=180)
        assert result.returncode == 1
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("webhooks: migration failed: search_path (webhooks,public): "
                               "schema webhooks does not exist and could not be created: "
                               "permission denied"), line
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP ROLE "{role}"'))
