"""`python -m benchmarks --only upgrade` (tiny in --smoke; alone: `python -m
benchmarks.upgrade`): migration 0023, the partitioning (alembic/versions/
0023_partitioned_events.py), on a database of the previous release while deliveries keep
arriving, as `webhooks migrate` runs it in a release phase beside the previous release's
processes.

On a database of its own beside the benchmark's: the migrations up to 0022, then `events`
events with their jobs (Stripe, GitHub, Shopify and Standard Webhooks, the GitHub and
Shopify ones with their body digests; pending, done and failed), the finished ones' search
documents and a duplicate record for one event in a hundred, received over the last 30
days, loaded by INSERT ... SELECT generate_series; ANALYZE and a CHECKPOINT. Then
deliveries at `rate` a second from `threads` threads, each due at its time (one in
REDELIVERY_EVERY a redelivery of a loaded event, the others new), through the previous
release's ingest statements (benchmarks/previous_release.py: what its web
runs): a baseline first, then while `alembic upgrade 0023` runs, then, once the switch is
committed, AFTER_SECONDS more with half the threads on the current record_event (the new
release's web) and half still on the previous statements (the old web until its processes
are replaced).

Reported: each step's time (expand, backfill, indexes, checks, switch: told apart by the
statements the migration runs, MigrationSteps), the switch's attempts, the delivery latency
(from when each was due, so that deliveries queued behind a lock count their wait) of the
deliveries due in each step, p50 / p99 / max, the longest any delivery took, the longest
lock wait another backend had on the tables (sampled), every delivery that failed (its
web would have answered 503), with when, and the migration's own failure if it failed (the
deliveries go on to the end either way); the database's size before and after; then that
no event was recorded twice, that each has its job and that each has its key in
webhook_dedup.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchmarks import load, migration_locks, report, stack
from benchmarks.previous_release import previous_record
from webhooks.shared import db, recording
from webhooks.shared.settings import Settings

BEFORE, TARGET = "0022", "0023"
EVENTS = 1_000_000
SMOKE: dict[str, Any] = {"events": 20_000, "baseline_seconds": 0.5, "after_seconds": 1.0}
RATE = 200  # deliveries a second, from all threads together
THREADS = 8
BASELINE_SECONDS = 2.0
AFTER_SECONDS = 5.0
REDELIVERY_EVERY = 10
STEPS = ("expand", "backfill", "indexes", "checks", "switch")
TABLES = ("webhook_events", "jobs", "event_search", "webhook_duplicates", "webhook_dedup")

# --- a database of the previous release ---------------------------------------------------

# Event n: its provider by n % 4; Standard Webhooks' ids shared by two sources (n and n + 4
# carry one message id, from clerk and from svix: two events, its ids being per source);
# its job failed for n % 20 = 0, pending for n % 20 = 1, else done, created with its event
# (one statement, as the previous release's ingest wrote them: one now()).
LoadPrevious = sa.text("""
    WITH picked AS (
        SELECT n, (ARRAY['stripe', 'github', 'shopify', 'standard'])[n % 4 + 1] AS provider,
               jsonb_build_object('id', n, 'note', repeat(md5(n::text), 16)) AS payload,
               now() - make_interval(secs => (:count - n) * 2592000.0 / :count) AS received_at
        FROM generate_series(1, :count) AS n
    ), events AS (
        INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                    body_sha256, received_at)
        SELECT provider,
               CASE WHEN provider <> 'standard' THEN provider
                    WHEN n / 4 % 2 = 0 THEN 'clerk' ELSE 'svix' END,
               CASE WHEN provider = 'standard' THEN 'msg-' || n / 8 ELSE provider || '-' || n END,
               CASE provider WHEN 'stripe' THEN 'invoice.paid' WHEN 'github' THEN 'push'
                             WHEN 'shopify' THEN 'orders/create' ELSE 'user.created' END,
               payload,
               CASE WHEN provider IN ('github', 'shopify')
                    THEN sha256(convert_to(payload::text, 'UTF8')) END,
               received_at
        FROM picked ORDER BY n
        RETURNING id, provider, source, event_id, event_type, received_at
    )
    INSERT INTO jobs (provider, source, event_id, event_type, status, attempts, outcome,
                      last_error, run_at, created_at, finished_at)
    SELECT provider, source, event_id, event_type,
           CASE id % 20 WHEN 0 THEN 'failed' WHEN 1 THEN 'pending' ELSE 'done' END,
           CASE id % 20 WHEN 0 THEN 8 WHEN 1 THEN 0 ELSE 1 END,
           CASE WHEN id % 20 > 1 THEN 'loaded' END,
           CASE WHEN id % 20 = 0 THEN 'loaded as failed' END,
           received_at, received_at,
           CASE WHEN id % 20 <> 1 THEN received_at + interval '1 second' END
    FROM events ORDER BY id
""")

# The search documents of the finished jobs, as the previous release's worker wrote them
# (no received_at: 0023 gives them '-infinity'), the index dropped and built again around
# them, as a bulk load would; a duplicate record for one event in a hundred.
LoadPreviousExtras = """
    DROP INDEX ix_event_search_document;
    INSERT INTO event_search (provider, source, event_id, document)
    SELECT j.provider, j.source, j.event_id,
           to_tsvector('simple', j.event_type || ' ' || j.event_id)
    FROM jobs j WHERE j.status <> 'pending';
    CREATE INDEX ix_event_search_document ON event_search USING gin (document)
        WITH (gin_pending_list_limit = 65536);
    INSERT INTO webhook_duplicates (provider, source, event_id, event_source, received_at)
    SELECT provider, source, event_id, source, received_at + interval '1 minute'
    FROM webhook_events WHERE id % 100 = 7;
"""


def load_previous(engine: Engine, events: int) -> None:
    """`events` events of the previous release's schema (LoadPrevious), their documents
    and duplicates, analysed and checkpointed."""
    with engine.connect() as conn:
        conn.execute(LoadPrevious, {"count": events})
        conn.execute(sa.text(LoadPreviousExtras))
        conn.execute(sa.text("ANALYZE; CHECKPOINT"))
        conn.commit()


def loaded_event(n: int) -> tuple[str, str, str, str]:
    """(provider, source, event_id, event_type) of LoadPrevious's event n."""
    provider = ("stripe", "github", "shopify", "standard")[n % 4]
    if provider == "standard":
        return provider, ("clerk" if n // 4 % 2 == 0 else "svix"), f"msg-{n // 8}", "user.created"
    event_type = {"stripe": "invoice.paid", "github": "push", "shopify": "orders/create"}
    return provider, provider, f"{provider}-{n}", event_type[provider]


# --- the migration's steps ------------------------------------------------------------------


def step_of(statement: str) -> str | None:
    """The step of 0023 (its docstring's numbering) that `statement` begins or belongs to,
    by its text; None: nothing tells (a statement of the step already running)."""
    if "FUNCTION webhook_dedup_key" in statement:
        return "expand"
    if "coalesce(max(id), 0) FROM webhook_events" in statement:
        return "backfill"
    if "INDEX CONCURRENTLY" in statement:
        return "indexes"
    if "legacy_bound" in statement:
        return "checks"
    if "LOCK TABLE webhook_events, jobs" in statement:
        return "switch"
    return None


@dataclass
class MigrationSteps:
    """When each step of 0023 began, from the statements the migration's engine runs (only
    forward: the switch drops the checks' constraints too), and when it was over. `pause`:
    seconds to wait before each step's first statement, where the migration holds no lock
    on the tables (a test's way to let deliveries land between every two steps)."""

    pause: float = 0.0
    started: dict[str, float] = field(default_factory=dict)
    ended: float | None = None
    switch_attempts: int = 0
    statements: list[dict[str, Any]] = field(default_factory=list)

    def listen(self, engine: Engine) -> None:
        sa.event.listen(engine, "before_cursor_execute", self._before)
        sa.event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        step = step_of(statement)
        if step == "switch":
            self.switch_attempts += 1
        if step is not None and (not self.started or STEPS.index(step) >
                                 STEPS.index(list(self.started)[-1])):
            if self.pause:
                time.sleep(self.pause)
            self.started[step] = time.monotonic()
        conn.info["statement_started"] = time.monotonic()

    def _after(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        seconds = time.monotonic() - conn.info.pop("statement_started", time.monotonic())
        if self.started and "alembic_version" not in statement:
            self.statements.append({"step": list(self.started)[-1],
                                    "sql": " ".join(statement.split())[:120],
                                    "seconds": round(seconds, 4)})

    def step_at(self, moment: float) -> str:
        """The step running at `moment` (time.monotonic()); "before" or "after" it all."""
        if not self.started or moment < next(iter(self.started.values())):
            return "before"
        if self.ended is not None and moment >= self.ended:
            return "after"
        return [step for step, started in self.started.items() if started <= moment][-1]

    def seconds(self) -> dict[str, float]:
        moments = [*self.started.values(), self.ended or time.monotonic()]
        return {step: round(moments[i + 1] - moments[i], 3)
                for i, step in enumerate(self.started)}


def upgrade(url: str, steps: MigrationSteps, revision: str = TARGET,
            backfill_batch: int | None = None) -> None:
    """`alembic upgrade revision` as migration_locks.upgrade runs it (a connection named
    MIGRATION_APP), its statements watched by `steps`."""
    from alembic import command
    from alembic.config import Config

    config = Config(str(migration_locks.ROOT / "alembic.ini"))
    config.attributes["configure_logger"] = False
    if backfill_batch is not None:
        config.attributes["backfill_batch"] = backfill_batch
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args={
        "application_name": migration_locks.MIGRATION_APP})
    steps.listen(engine)
    try:
        with engine.connect() as conn:
            config.attributes["connection"] = conn
            steps.started.setdefault("expand", time.monotonic())
            command.upgrade(config, revision)
        steps.ended = time.monotonic()
    finally:
        engine.dispose()


# --- deliveries ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    due: float  # time.monotonic() when it was due
    ms: float  # from due to answer
    web: str  # "previous" or "current"
    error: str | None  # the failure's type and first line: answered 503


class Deliveries:
    """`threads` threads delivering `rate` a second in all until stop(): each thread's
    deliveries due at fixed intervals (one late starts at once: its wait counts), one in
    REDELIVERY_EVERY a loaded event again, through the previous release's statements;
    after use_current_web(), the even-numbered threads through record_event."""

    def __init__(self, url: str, loaded: int, rate: float, threads: int) -> None:
        settings = Settings.from_env({"DATABASE_URL": url})
        self.previous = db.create_engine(settings, pool_size=threads, autocommit=True)
        self.current = db.create_engine(settings, pool_size=threads, autocommit=True)
        self.loaded, self.interval = loaded, threads / rate
        self.done: list[Delivery] = []
        self._current_web, self._stop = threading.Event(), threading.Event()
        self._threads = [threading.Thread(target=self._deliver, args=(i, threads), daemon=True)
                         for i in range(threads)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def use_current_web(self) -> None:
        self._current_web.set()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        self.previous.dispose()
        self.current.dispose()

    def _deliver(self, index: int, threads: int) -> None:
        due = time.monotonic() + self.interval * index / threads
        count = 0
        while not self._stop.is_set():
            time.sleep(max(0.0, due - time.monotonic()))
            count += 1
            current = self._current_web.is_set() and index % 2 == 0
            error = None
            try:
                self._one(current, count * threads + index)
            except Exception as failure:  # the web's answer would be 503
                error = f"{type(failure).__name__}: {(str(failure).splitlines() or [''])[0]}"
            self.done.append(Delivery(due, (time.monotonic() - due) * 1000,
                                      "current" if current else "previous", error))
            due += self.interval

    def _one(self, current: bool, number: int) -> None:
        if number % REDELIVERY_EVERY == 0:
            provider, source, event_id, event_type = loaded_event(number % self.loaded + 1)
        else:
            provider, event_id = ("stripe", "github")[number % 2], str(uuid.uuid4())
            source, event_type = provider, ("invoice.paid", "push")[number % 2]
        body = f'{{"id": "{event_id}", "note": "{"x" * 900}"}}'.encode()
        if current:
            recording.record_event(self.current, provider, event_id, event_type, body,
                                   origin=recording.Origin(source=source))
        else:
            previous_record(self.previous, provider, event_id, event_type, body, source)


# --- the measure --------------------------------------------------------------------------


CheckDuplicates = """SELECT count(*) FROM (SELECT FROM webhook_events
    GROUP BY webhook_dedup_key(provider, source, event_id) HAVING count(*) > 1) twice"""
CheckWithoutJob = """SELECT count(*) FROM webhook_events e WHERE NOT EXISTS (
    SELECT FROM jobs j WHERE j.provider = e.provider AND j.source = e.source
    AND j.event_id = e.event_id AND j.created_at = e.received_at)"""
CheckWithoutKey = """SELECT count(*) FROM webhook_events e WHERE NOT EXISTS (
    SELECT FROM webhook_dedup d WHERE d.key = webhook_dedup_key(e.provider, e.source,
    e.event_id))"""


def measure(url: str, events: int, rate: float = RATE, threads: int = THREADS,
            baseline_seconds: float = BASELINE_SECONDS,
            after_seconds: float = AFTER_SECONDS) -> dict[str, Any]:
    """Load the database at 0022, then migrate it to 0023 beside the deliveries."""
    migration_locks.upgrade(url, BEFORE)
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    try:
        started = time.monotonic()
        load_previous(engine, events)
        loaded_seconds = time.monotonic() - started
        sizes = {"before_mb": _database_mb(engine)}
        steps = MigrationSteps()
        deliveries = Deliveries(url, events, rate, threads)
        failure = None
        with migration_locks.LockSampler(engine, TABLES) as locks:
            deliveries.start()
            try:
                time.sleep(baseline_seconds)
                try:
                    upgrade(url, steps)
                    deliveries.use_current_web()
                except Exception as error:  # reported, with the deliveries beside it
                    steps.ended = time.monotonic()
                    failure = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
                time.sleep(after_seconds)
            finally:
                deliveries.stop()
        sizes["after_mb"] = _database_mb(engine)
        checks: dict[str, int] = {}
        if failure is None:
            with engine.connect() as conn:
                checks = {name: conn.execute(sa.text(sql)).scalar_one() for name, sql in (
                    ("events_twice", CheckDuplicates), ("events_without_job", CheckWithoutJob),
                    ("events_without_key", CheckWithoutKey))}
    finally:
        engine.dispose()
    return {**_result(events, rate, threads, loaded_seconds, steps, deliveries.done, locks,
                      checks), "migration_failed": failure, "database_size": sizes}


def _database_mb(engine: Engine) -> float:
    with engine.connect() as conn:
        size = conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one()
    return round(size / 2**20, 1)


def _result(events: int, rate: float, threads: int, loaded_seconds: float,
            steps: MigrationSteps, done: list[Delivery],
            locks: migration_locks.LockSampler, checks: dict[str, int]) -> dict[str, Any]:
    assert steps.ended is not None
    origin = next(iter(steps.started.values()))
    seconds = steps.seconds()
    by_phase: dict[str, list[Delivery]] = {}
    for delivery in done:
        phase = steps.step_at(delivery.due)
        if phase == "after":
            phase = f"after, {delivery.web} web"
        by_phase.setdefault(phase, []).append(delivery)
    phases = ["before", *STEPS, "after, previous web", "after, current web"]
    failed = [{"at_s": round(d.due - origin, 3), "step": steps.step_at(d.due), "web": d.web,
               "error": d.error} for d in done if d.error]
    return {
        "events": events, "rate": rate, "threads": threads,
        "load_seconds": round(loaded_seconds, 1),
        "migration_seconds": round(steps.ended - origin, 3),
        "steps": {step: {"seconds": seconds.get(step),
                         "deliveries": _latency(by_phase.get(step, []))} for step in STEPS},
        "switch_attempts": steps.switch_attempts,
        "deliveries": {phase: _latency(by_phase.get(phase, [])) for phase in phases},
        "longest_delivery_ms": round(max((d.ms for d in done), default=0.0), 1),
        "longest_lock_wait_ms": locks.longest_wait_ms,
        "locks_held": sorted(locks.held),
        "failed": failed,
        "failed_window_s": [failed[0]["at_s"], failed[-1]["at_s"]] if failed else None,
        "checks": checks,
        "statements": [s for s in steps.statements if s["seconds"] >= 0.05],
    }


def _latency(done: list[Delivery]) -> dict[str, Any]:
    values = [d.ms for d in done if d.error is None]
    figures: dict[str, Any] = {"count": len(done), "failed": len(done) - len(values)}
    if values:
        figures.update(p50_ms=round(load.percentile(values, 50), 2),
                       p99_ms=round(load.percentile(values, 99), 2),
                       max_ms=round(max(values), 2))
    return figures


def run(target: stack.Target, events: int = EVENTS, baseline_seconds: float = BASELINE_SECONDS,
        after_seconds: float = AFTER_SECONDS) -> dict[str, Any]:
    """The scenario, on `<the benchmark's database>_upgrade` (created beside it, dropped
    after)."""
    url = sa.make_url(db.sqlalchemy_url(target.database_url))
    name = f"{url.database}_upgrade"
    created = _create(url, name)
    try:
        return measure(created, events, baseline_seconds=baseline_seconds,
                       after_seconds=after_seconds)
    finally:
        _drop(url, name)


def _create(url: sa.URL, name: str) -> str:
    _drop(url, name)
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return url.set(database=name).render_as_string(hide_password=False)


def _drop(url: sa.URL, name: str) -> None:
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def print_summary(result: dict[str, Any]) -> None:
    print(f"{result['events']:,} events of revision {BEFORE} loaded in "
          f"{result['load_seconds']} s; {BEFORE} -> {TARGET} in {result['migration_seconds']} s "
          f"beside {result['rate']} deliveries/s ({result['threads']} threads)")
    for phase, figures in result["deliveries"].items():
        took = result["steps"].get(phase, {}).get("seconds")
        print(f"  {phase:<22} {'' if took is None else f'{took:8.3f} s':>10}  "
              f"deliveries {figures['count']:5d}  failed {figures['failed']}  "
              f"p50 {figures.get('p50_ms', '-')} ms  p99 {figures.get('p99_ms', '-')} ms  "
              f"max {figures.get('max_ms', '-')} ms")
    print(f"  switch attempts {result['switch_attempts']}; longest delivery "
          f"{result['longest_delivery_ms']} ms; longest lock wait sampled "
          f"{result['longest_lock_wait_ms']} ms")
    window = result["failed_window_s"]
    print(f"  failed deliveries (503): {len(result['failed'])}"
          + (f", from {window[0]} s to {window[1]} s after the start" if window else ""))
    if result["migration_failed"]:
        print(f"  the migration failed: {result['migration_failed']}")
    sizes = result["database_size"]
    print(f"  database {sizes['before_mb']:,} MB before, {sizes['after_mb']:,} MB after")
    print(f"  checks: {result['checks']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.upgrade", description=__doc__)
    parser.add_argument("--events", type=int, default=EVENTS)
    parser.add_argument("--smoke", action="store_true",
                        help=f"{SMOKE['events']:,} events, short baseline and after")
    stack.add_server_options(parser, broker_db=11)
    args = parser.parse_args(argv)
    name = "webhooks_bench_upgrade"
    url = sa.make_url(db.sqlalchemy_url(args.admin_url))
    created = _create(url, name)
    try:
        plan: dict[str, Any] = dict(SMOKE) if args.smoke else {"events": args.events}
        result = measure(created, **plan)
    finally:
        _drop(url, name)
    print_summary(result)
    report.save_tool_run("upgrade", argv, "upgrade", {"upgrade": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
