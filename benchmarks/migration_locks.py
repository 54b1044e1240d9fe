"""`python -m benchmarks.migration_locks`: what a migration makes the ingest wait for, on a
database of a given size, while deliveries keep arriving.

On a database of its own: the migrations up to `--before`, then `--events` events with
their jobs (GitHub and Shopify deliveries, each with its body digest, payloads of about
1 KB), ANALYZE and a CHECKPOINT; then `--writers` threads record deliveries through the
ingest's statements (the release before 0023's: benchmarks/previous_release.py) for a
baseline second and on through `alembic upgrade --revision`. Reported: the migration's
time and each of its statements' times, the locks it held on webhook_events and jobs
(pg_locks, sampled every few milliseconds), the longest any other backend waited for a lock
on them, and the writers' acknowledgement latency before and during the migration.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

from benchmarks import load, report, stack
from benchmarks.previous_release import previous_record
from webhooks.shared.db import sqlalchemy_url

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("webhook_events", "jobs")
MIGRATION_APP = "webhooks-migration"

LoadEvents = sa.text("""
    WITH events AS (
        INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                    body_sha256, received_at)
        SELECT p, p, p || '-' || n, CASE WHEN p = 'github' THEN 'push' ELSE 'orders/create' END,
               jsonb_build_object('id', n, 'note', repeat(md5(n::text), 30)),
               sha256(convert_to(p || n::text, 'UTF8')), now() - interval '1 day'
        FROM generate_series(1, :count) AS n,
             LATERAL (SELECT CASE WHEN n % 2 = 0 THEN 'github' ELSE 'shopify' END AS p) AS pick
        RETURNING provider, source, event_id, event_type
    )
    INSERT INTO jobs (provider, source, event_id, event_type, status, outcome, finished_at)
    SELECT provider, source, event_id, event_type, 'done', 'loaded', now() FROM events
""")

# Relation locks on the measured tables, and how long each waiting backend has waited.
LocksOnTables = sa.text("""
    SELECT c.relname, l.mode, l.granted, a.application_name = :migration AS migration,
           l.pid, extract(epoch FROM now() - coalesce(a.state_change, a.query_start)) AS waited
    FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
    JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE c.relname = ANY(:tables) AND l.pid <> pg_backend_pid()
""")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.migration_locks",
                                     description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--before", default="0020", help="the revision the database is at")
    parser.add_argument("--revision", default="0021", help="the revision migrated to")
    parser.add_argument("--writers", type=int, default=2)
    stack.add_server_options(parser, broker_db=11)
    args = parser.parse_args(argv)
    name = "webhooks_bench_migration_locks"
    url = _create(args.admin_url, name)
    try:
        result = measure(url, args.events, args.before, args.revision, args.writers)
    finally:
        stack.drop(args.admin_url, name)
    _print(result)
    report.save_tool_run("migration_locks", argv, f"migration-{args.revision}", result)
    return 0


def measure(url: str, events: int, before: str, revision: str, writers: int) -> dict[str, Any]:
    """Load the database at `before`, then migrate it to `revision` beside the writers."""
    upgrade(url, before)
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", pool_size=writers + 2)
    try:
        started = time.monotonic()
        with engine.connect() as conn:
            conn.execute(LoadEvents, {"count": events})
            conn.execute(sa.text("ANALYZE webhook_events; ANALYZE jobs; CHECKPOINT"))
        loaded_seconds = time.monotonic() - started
        with _writers(engine, writers) as latencies, LockSampler(engine) as locks:
            time.sleep(1.0)
            baseline = len(latencies)
            statements: list[dict[str, Any]] = []
            started = time.monotonic()
            upgrade(url, revision, statements)
            seconds = time.monotonic() - started
            during = latencies[baseline:]
            before_ms = latencies[:baseline]
        return {"events": events, "from": before, "to": revision,
                "load_seconds": round(loaded_seconds, 1),
                "migration_seconds": round(seconds, 3), "statements": statements,
                "locks_held": sorted(locks.held), "longest_lock_wait_ms": locks.longest_wait_ms,
                "acks_before": _latency(before_ms), "acks_during": _latency(during)}
    finally:
        engine.dispose()


def upgrade(url: str, revision: str, statements: list[dict[str, Any]] | None = None) -> None:
    """alembic upgrade on a connection named MIGRATION_APP, each statement timed into
    `statements`."""
    config = Config(str(ROOT / "alembic.ini"))
    config.attributes["configure_logger"] = False
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool,
                              connect_args={"application_name": MIGRATION_APP})
    if statements is not None:
        _time_statements(engine, statements)
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    engine.dispose()


def _time_statements(engine: Engine, statements: list[dict[str, Any]]) -> None:
    def before(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        conn.info["statement_started"] = time.monotonic()

    def after(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        seconds = time.monotonic() - conn.info.pop("statement_started", time.monotonic())
        if "alembic_version" not in statement and "pg_catalog" not in statement:
            statements.append({"sql": " ".join(statement.split())[:120],
                               "seconds": round(seconds, 4)})

    sa.event.listen(engine, "before_cursor_execute", before)
    sa.event.listen(engine, "after_cursor_execute", after)


@contextmanager
def _writers(engine: Engine, count: int) -> Any:
    """Threads recording new GitHub deliveries as the web of the release before 0023 does
    (the migrations measured here come before it) until the block ends;
    yields the acknowledgement latencies (ms), in order."""
    latencies: list[float] = []
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            event_id = str(uuid.uuid4())
            body = f'{{"after": "{event_id}", "note": "{"x" * 900}"}}'.encode()
            started = time.monotonic()
            previous_record(engine, "github", event_id, "push", body)
            latencies.append((time.monotonic() - started) * 1000)

    threads = [threading.Thread(target=write, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield latencies
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


class LockSampler:
    """Samples LocksOnTables every few milliseconds while the block runs: the modes the
    migration held, and the longest wait of any other backend for a lock on `tables`."""

    def __init__(self, engine: Engine, tables: tuple[str, ...] = TABLES) -> None:
        self.engine, self.tables = engine, tables
        self.held, self.longest_wait_ms = set[str](), 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> LockSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _sample(self) -> None:
        with self.engine.connect() as conn:
            while not self._stop.is_set():
                for row in conn.execute(LocksOnTables, {"tables": list(self.tables),
                                                        "migration": MIGRATION_APP}):
                    if row.migration and row.granted:
                        self.held.add(f"{row.relname} {row.mode}")
                    elif not row.granted and not row.migration:
                        self.longest_wait_ms = max(self.longest_wait_ms,
                                                   round(float(row.waited or 0) * 1000, 1))
                time.sleep(0.005)


def _latency(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0}
    return {"count": len(values), "p50_ms": round(load.percentile(values, 50), 2),
            "p99_ms": round(load.percentile(values, 99), 2), "max_ms": round(max(values), 2)}


def _create(admin_url: str, name: str) -> str:
    admin = sa.create_engine(sqlalchemy_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return str(sa.make_url(sqlalchemy_url(admin_url)).set(database=name)
               .render_as_string(hide_password=False))


def _print(result: dict[str, Any]) -> None:
    print(f"{result['events']:,} events loaded in {result['load_seconds']} s; "
          f"{result['from']} -> {result['to']} in {result['migration_seconds']} s")
    for statement in result["statements"]:
        print(f"  {statement['seconds']:8.3f} s  {statement['sql']}")
    print(f"locks held by the migration: {', '.join(result['locks_held']) or 'none seen'}")
    print(f"longest wait of another backend for a lock on {', '.join(TABLES)}: "
          f"{result['longest_lock_wait_ms']} ms")
    for phase in ("acks_before", "acks_during"):
        print(f"{phase}: {result[phase]}")


if __name__ == "__main__":
    sys.exit(main())
