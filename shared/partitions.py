"""The time partitions of events, jobs and search documents, and the generations of the dedup
keys (SPEC "Growth: cost flat as history grows"; the tables are drawn in shared/models.py).

The clock keeps them, with no extension (pg_partman would do the same, but it is one more
thing to install on every managed Postgres and in the embedded one, and the moves of kept
rows below are ours to make anyway):

- `maintain`, hourly and at the clock's start: a partition per UTC day from today to
  DAYS_AHEAD days ahead, never one for a day gone (a clock that was down creates today's
  and the days after; rows of the days it missed stayed in the DEFAULT partition, moved
  into today's partition when it is created); a new dedup generation once the current one
  is a third of the horizon old; ANALYZE of the partitioned tables, which autovacuum never
  analyses (their partitions it does).
- `prune`, nightly (retention): every day's partition whose whole range is older than the
  cutoff is detached, a transaction for each (jobs' days first), then dropped. What is not
  finished in it (a pending or failed job, its event, its search document) is copied into
  the DEFAULT partitions as it is detached: nothing an operator may still replay is lost. The WAL it
  writes is the catalogs' and the kept rows', whatever the number of rows dropped.
  Then the DEFAULT partitions' finished rows past the cutoff go row by row
  (queries.EventDeleteFinished: few rows), and every dedup generation whose newest key is
  older than the horizon is dropped, the keys of events still stored (kept ones) first
  copied into the current generation.

Every step locks one partitioned table (and its partitions), waits at most LOCK_TIMEOUT for
it (the ingest queues behind a waiting ACCESS EXCLUSIVE request; below Postgres's
deadlock_timeout, so that a wait of ours never makes a delivery's transaction the victim of
a deadlock check) and tries again, ATTEMPTS times.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from webhooks.shared import queries
from webhooks.shared.models import (
    EVENTS_PARTITION_KEY,
    JOBS_PARTITION_KEY,
    JobStatus,
    event_search,
    jobs,
    webhook_events,
)

log = logging.getLogger(__name__)

DAYS_AHEAD = 7
LOCK_TIMEOUT = "500ms"  # below deadlock_timeout (1 s by default)
ATTEMPTS = 60
GENERATIONS_PER_HORIZON = 3  # a generation lasts a third of DEDUP_HORIZON_DAYS
BATCH_SIZE = 1000  # rows per transaction of the row-by-row pass

# The partitioned tables, in the order every statement that locks several of them locks
# them (the ingest's insert, the claims: shared/queries.py), so that no two wait in a circle.
TABLES = (
    (webhook_events, EVENTS_PARTITION_KEY),
    (jobs, JOBS_PARTITION_KEY),
    (event_search, EVENTS_PARTITION_KEY),
)
_BOUND = re.compile(r"FOR VALUES FROM \((?P<lower>[^)]*)\) TO \((?P<upper>[^)]*)\)")


@dataclass(frozen=True)
class Partition:
    table: str
    name: str
    lower: datetime | None  # None: MINVALUE
    upper: datetime | None  # None: the DEFAULT partition
    default: bool = False


def partitions(conn: Connection, table: str) -> list[Partition]:
    """The partitions of `table`, as Postgres prints their bounds."""
    found = []
    for name, bound in conn.execute(sa.text("""
            SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
            JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = CAST(:table AS regclass) ORDER BY c.relname"""),
            {"table": table}):
        if bound == "DEFAULT":
            found.append(Partition(table, name, None, None, default=True))
            continue
        match = _BOUND.match(bound)
        if match is None:
            raise RuntimeError(f"partition {name} of {table} has a bound this code does not "
                               f"read: {bound}")
        found.append(Partition(table, name, _instant(match["lower"]), _instant(match["upper"])))
    return found


def _instant(literal: str) -> datetime | None:
    if literal == "MINVALUE":
        return None
    return datetime.fromisoformat(literal.strip("'"))


def day_partition(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def midnight(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), tzinfo=UTC)


# --- maintenance ---------------------------------------------------------------------------


def maintain(engine: Engine, horizon_days: int, days_ahead: int = DAYS_AHEAD) -> list[str]:
    """Today's and the next days' partitions, the dedup generation, the parents' statistics.
    Returns the partitions it created."""
    created = []
    with engine.connect() as conn:
        today = conn.execute(sa.text("SELECT CAST(now() AT TIME ZONE 'UTC' AS date)")).scalar_one()
    for offset in range(days_ahead + 1):
        day = today + timedelta(days=offset)
        for table, key in TABLES:
            if _with_locks(engine, _creating(table.name, key, day)):
                created.append(day_partition(table.name, day))
    _with_locks(engine, lambda conn: _rotate_generation(conn, horizon_days))
    with engine.connect() as conn:
        for table, _key in TABLES:
            conn.execute(sa.text(f"ANALYZE {table.name}"))
        conn.commit()
    if created:
        log.info("partitions created", extra={"partitions": ", ".join(created)})
    return created


def _creating(table: str, key: str, day: date) -> Callable[[Connection], bool]:
    return lambda conn: _create_day(conn, table, key, day)


def _create_day(conn: Connection, table: str, key: str, day: date) -> bool:
    lower, upper = midnight(day), midnight(day + timedelta(days=1))
    for partition in partitions(conn, table):
        if partition.default:
            continue
        if (partition.lower is None or partition.lower < upper) and (
                partition.upper is not None and partition.upper > lower):
            return False  # covered (a day's partition, or the legacy one up to its bound)
    name = day_partition(table, day)
    bounds = {"lower": lower, "upper": upper}
    waiting = conn.execute(sa.text(
        f"SELECT EXISTS (SELECT FROM {table}_default WHERE {key} >= :lower AND {key} < :upper)"),
        bounds).scalar_one()
    if not waiting:
        conn.execute(sa.text(
            f"CREATE TABLE {name} PARTITION OF {table} FOR VALUES FROM "
            f"('{lower.isoformat()}') TO ('{upper.isoformat()}')"))
        return True
    # Rows recorded while no partition covered the day (the clock was down): moved into
    # the day's table, then attached (its CHECK proves the bound: no second scan).
    columns = ", ".join(_columns(conn, table))
    conn.execute(sa.text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
    conn.execute(sa.text(
        f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"))
    conn.execute(sa.text(
        f"ALTER TABLE {name} ADD CONSTRAINT {name}_bound "
        f"CHECK ({key} >= '{lower.isoformat()}' AND {key} < '{upper.isoformat()}')"))
    conn.execute(sa.text(f"""
        WITH moved AS (DELETE FROM {table}_default WHERE {key} >= :lower AND {key} < :upper
                       RETURNING {columns})
        INSERT INTO {name} ({columns}) SELECT {columns} FROM moved"""), bounds)
    conn.execute(sa.text(
        f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM "
        f"('{lower.isoformat()}') TO ('{upper.isoformat()}')"))
    conn.execute(sa.text(f"ALTER TABLE {name} DROP CONSTRAINT {name}_bound"))
    return True


def _columns(conn: Connection, table: str) -> list[str]:
    return list(conn.execute(sa.text("""
        SELECT attname FROM pg_attribute WHERE attrelid = CAST(:table AS regclass)
        AND attnum > 0 AND NOT attisdropped ORDER BY attnum"""), {"table": table}).scalars())


def _rotate_generation(conn: Connection, horizon_days: int) -> bool:
    """A new generation once the current one is a third of the horizon old. The EXCLUSIVE
    lock waits for every insert into webhook_dedup in flight and holds the next ones until
    the new generation is committed: a key is then checked against a generation that takes
    no more rows (queries.EventJobInsert)."""
    current, age = conn.execute(sa.text("""
        SELECT generation, now() - started_at FROM dedup_generations
        ORDER BY generation DESC LIMIT 1""")).one()
    if age < timedelta(days=horizon_days / GENERATIONS_PER_HORIZON):
        return False
    conn.execute(sa.text("LOCK TABLE webhook_dedup IN EXCLUSIVE MODE"))
    conn.execute(sa.text(f"CREATE TABLE webhook_dedup_g{current + 1} PARTITION OF "
                         f"webhook_dedup FOR VALUES IN ({current + 1})"))
    conn.execute(sa.text("INSERT INTO dedup_generations (generation) VALUES (:g)"),
                 {"g": current + 1})
    log.info("dedup generation started", extra={"generation": current + 1})
    return True


# --- retention -----------------------------------------------------------------------------


@dataclass
class Pruned:
    events: int = 0  # events removed (dropped with their day, or deleted from DEFAULT)
    kept: int = 0  # unfinished jobs moved to the DEFAULT partition before their day went
    partitions: int = 0  # partitions dropped
    generations: int = 0  # dedup generations dropped


def prune(engine: Engine, days: int, horizon_days: int,
          batch_size: int = BATCH_SIZE) -> Pruned:
    """Retention: the days older than `days` dropped whole, their unfinished rows kept;
    then the DEFAULT partitions' finished rows, row by row; then the dedup generations past
    max(horizon_days, days)."""
    pruned = Pruned()
    with engine.connect() as conn:
        cutoff = conn.execute(sa.text("SELECT now() - make_interval(days => :days)"),
                              {"days": days}).scalar_one()
        expired = {table.name: [p for p in partitions(conn, table.name)
                                if not p.default and p.upper is not None and p.upper <= cutoff]
                   for table, _key in TABLES}
    # Jobs first: their unfinished ones are in the DEFAULT partition before their events'
    # day goes, whose events are kept by them; then the search documents of the events
    # kept. One table and one day a transaction, which detaches the day and copies what
    # it keeps (through indexes: a few rows), no more: no lock is held while waiting for
    # another (a prepared statement locks its tables in another order than the same
    # statement planned anew, so no order of several would be safe), and the parent is
    # locked for milliseconds. Counting and dropping the detached tables locks nothing
    # the ingest or the workers use.
    kept_events = {}
    for partition in expired[jobs.name]:
        pruned.kept += _with_locks(engine, _detaching(partition, KEEP_JOBS))
    for partition in expired[webhook_events.name]:
        kept_events[partition.name] = _with_locks(engine, _detaching(partition, KEEP_EVENTS))
    for partition in expired[event_search.name]:
        _with_locks(engine, _detaching(partition, KEEP_DOCUMENTS))
    pruned.partitions += sum(len(found) for found in expired.values())
    pruned.events += _drop_detached(engine, kept_events)
    if pruned.partitions:
        log.info("partitions dropped", extra={
            "partitions": ", ".join(p.name for found in expired.values() for p in found),
            "kept_jobs": pruned.kept})
    while True:
        with engine.begin() as conn:
            deleted = conn.execute(queries.EventDeleteFinished,
                                   {"days": days, "limit": batch_size}).scalar_one()
        pruned.events += deleted
        if deleted < batch_size:
            break
    while _with_locks(engine, lambda conn: _drop_generation(conn, max(horizon_days, days))):
        pruned.generations += 1
    return pruned


# What a dropped day keeps, copied into its table's DEFAULT partition (`kept`: the detached
# day's rows, :lower and :upper its bounds): unfinished jobs; the events of unfinished jobs
# (kept already, so in the DEFAULT partition now); the search documents of events kept.
_UNFINISHED = f"('{JobStatus.PENDING}', '{JobStatus.FAILED}')"
KEEP_JOBS = f"status IN {_UNFINISHED}"
KEEP_EVENTS = f"""(provider, source, event_id, {EVENTS_PARTITION_KEY}) IN (
    SELECT provider, source, event_id, {JOBS_PARTITION_KEY} FROM {jobs.name}
    WHERE status IN {_UNFINISHED} AND {JOBS_PARTITION_KEY} < :upper
      AND (CAST(:lower AS timestamptz) IS NULL OR {JOBS_PARTITION_KEY} >= :lower))"""
KEEP_DOCUMENTS = f"""(provider, source, event_id) IN (
    SELECT provider, source, event_id FROM {webhook_events.name}
    WHERE {EVENTS_PARTITION_KEY} < :upper
      AND (CAST(:lower AS timestamptz) IS NULL OR {EVENTS_PARTITION_KEY} >= :lower))"""
# A day detached by an earlier prune that stopped before dropping it (what it keeps was
# copied in the detaching transaction): dropped with the others.
_DETACHED = r"^(webhook_events|jobs|event_search)_(p[0-9]{8}|legacy)$"


def _detaching(partition: Partition, keep: str) -> Callable[[Connection], int]:
    return lambda conn: _detach(conn, partition, keep)


def _detach(conn: Connection, partition: Partition, keep: str) -> int:
    """A day's partition detached and the rows `keep` selects copied into the DEFAULT
    partition (which covers the day once it is detached): one transaction. Returns the
    rows kept."""
    conn.execute(sa.text(f"ALTER TABLE {partition.table} DETACH PARTITION {partition.name}"))
    columns = ", ".join(_columns(conn, partition.table))
    return conn.execute(sa.text(
        f"INSERT INTO {partition.table} ({columns}) SELECT {columns} FROM {partition.name} "
        f"kept WHERE {keep}"), {"lower": partition.lower, "upper": partition.upper}).rowcount


def _drop_detached(engine: Engine, kept_events: dict[str, int]) -> int:
    """Every detached day dropped; returns the events that went with them."""
    gone = 0
    with engine.connect() as conn:
        names = conn.execute(sa.text("""
            SELECT relname FROM pg_class WHERE relkind = 'r' AND NOT relispartition
            AND relnamespace = CAST(current_schema() AS regnamespace)
            AND relname ~ :pattern ORDER BY relname"""), {"pattern": _DETACHED}).scalars().all()
        for name in names:
            if name.startswith(f"{webhook_events.name}_"):
                rows = conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one()
                gone += int(rows) - kept_events.get(name, 0)
            conn.execute(sa.text(f"DROP TABLE {name}"))
            conn.commit()
    return gone


def _drop_generation(conn: Connection, horizon_days: int) -> bool:
    """The oldest generation, if its newest key (the next generation's start) is older than
    the horizon; the keys of the events still stored from before then (kept, unfinished:
    their days are gone, they are in the DEFAULT partition) copied into the current
    generation first, with a day's margin (a delivery that began as the next generation
    started is in the older one). False: none to drop."""
    rows = conn.execute(sa.text("""
        SELECT generation, started_at FROM dedup_generations ORDER BY generation""")).all()
    if len(rows) < 2:
        return False
    (oldest, _started), (_next, ended) = rows[0], rows[1]
    expired = conn.execute(sa.text("SELECT :ended < now() - make_interval(days => :days)"),
                           {"ended": ended, "days": horizon_days}).scalar_one()
    if not expired:
        return False
    conn.execute(sa.text("LOCK TABLE webhook_dedup IN ACCESS EXCLUSIVE MODE"))
    conn.execute(sa.text(f"""
        INSERT INTO webhook_dedup (generation, key, body_key, source, event_id, received_at)
        SELECT (SELECT max(generation) FROM dedup_generations),
               webhook_dedup_key(provider, source, event_id),
               webhook_body_key(provider, event_type, body_sha256),
               source, event_id, {EVENTS_PARTITION_KEY}
        FROM webhook_events WHERE {EVENTS_PARTITION_KEY} < :ended + interval '1 day'
        ON CONFLICT DO NOTHING"""), {"ended": ended})
    conn.execute(sa.text(f"DROP TABLE webhook_dedup_g{oldest}"))
    conn.execute(sa.text("DELETE FROM dedup_generations WHERE generation = :g"), {"g": oldest})
    log.info("dedup generation dropped", extra={"generation": oldest})
    return True


T = TypeVar("T")


def _with_locks(engine: Engine, step: Callable[[Connection], T]) -> T:
    """`step` in a transaction whose lock waits end after LOCK_TIMEOUT; tried again after a
    pause, ATTEMPTS times, while it times out."""
    for attempt in range(ATTEMPTS):
        try:
            with _transaction(engine) as conn:
                return step(conn)
        except sa.exc.OperationalError as error:
            if "lock timeout" not in str(error) or attempt == ATTEMPTS - 1:
                raise
            log.info("partition maintenance waited too long for a lock; trying again")
            time.sleep(min(2 ** attempt * 0.1, 10))
    raise AssertionError("unreachable")


@contextmanager
def _transaction(engine: Engine) -> Iterator[Connection]:
    with engine.begin() as conn:
        conn.execute(sa.text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        yield conn
