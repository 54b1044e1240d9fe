"""Fake history for the benchmarks that need days of events behind today (growth,
retention): done Stripe-shaped events of 1-2 KB, their jobs, their search documents and
their dedup keys, each day in that day's partitions, as the ingest and the worker would
have left them (an event's job and document in the same day, `jobs.created_at` its event's
`received_at`, the key in the current dedup generation). Also the empty days' partitions
and the clean-up after a measure that the others share (search).

A day is filled the bulk-load way, as shared/partitions.py attaches a day whose rows waited
in the DEFAULT partition: its three tables created apart (LIKE the partitioned table, no
index, no trigger), filled with INSERT ... SELECT generate_series, then attached with a CHECK
that proves the bound (no scan), which builds each partitioned index on the day at once
rather than row by row. The payloads are TEMPLATES of search_events.sql's events
(bench_stripe_event) with the row's own id, so that a day costs no more JSON building than
a copy; the documents are the template's (models.EVENT_SEARCH_DOCUMENT) with the row's id.
The dedup keys go into webhook_dedup as the ingest inserts them, one by one into its
indexes, in the events' order (random keys, as deliveries give them).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from webhooks.shared import partitions
from webhooks.shared.models import EVENT_SEARCH_DOCUMENT

HERE = Path(__file__).resolve().parent
TEMPLATES = 1000  # distinct payloads the history's events copy
CONNECTIONS = 2  # days filled at once (INSERT ... SELECT runs on one core)
MAINTENANCE_WORK_MEM = "256MB"  # for the index builds of an attach
# The fill's event n (its id, its time in the day, its template), for each statement of a
# day alike: the events, their jobs, documents and keys agree without reading each other.
ROWS = f"""
    SELECT n, 'evt_1' || substr(md5('evt_h' || n), 1, 23) AS event_id,
           CAST(:lower AS timestamptz)
               + make_interval(secs => (n - CAST(:first AS bigint)) * :spacing) AS at,
           t.payload ->> 'type' AS event_type, t.payload, t.document
    FROM generate_series(CAST(:first AS bigint),
                         CAST(:first AS bigint) + CAST(:count AS bigint) - 1) AS n
    JOIN bench_history_templates t ON t.k = n % {TEMPLATES}
"""


def past_days(first: int, count: int, today: date) -> list[date]:
    """`count` days ending `first` days before `today`, oldest first."""
    return [today - timedelta(days=first + offset) for offset in reversed(range(count))]


def today(engine: Engine) -> date:
    """Today in UTC on the database's clock (the day partitions.maintain starts from)."""
    with engine.connect() as conn:
        day: date = conn.execute(sa.text(
            "SELECT CAST(now() AT TIME ZONE 'UTC' AS date)")).scalar_one()
    return day


def prepare(engine: Engine) -> None:
    """bench_stripe_event (search_events.sql) and the templates' table, once per database."""
    with engine.begin() as conn:
        conn.execute(sa.text((HERE / "search_events.sql").read_text()))
        conn.execute(sa.text(f"""
            CREATE TABLE IF NOT EXISTS bench_history_templates AS
            SELECT k, payload, {EVENT_SEARCH_DOCUMENT} AS document
            FROM (SELECT k, '' AS event_id, bench_stripe_event(k) AS payload
                  FROM generate_series(0, {TEMPLATES - 1}) AS k) AS t"""))


def fill(engine: Engine, days: Iterable[date], per_day: int, *, first: int = 0,
         keys: bool = True, documents: bool = True) -> dict[str, Any]:
    """`per_day` events on each of `days` (event n of the whole fill, counted from `first`,
    has the id evt_h<n>'s md5: ids never repeat across fills that start apart), with their
    jobs, documents (unless not `documents`: the day's event_search partition left empty)
    and dedup keys (unless not `keys`: a refill of rows whose keys are there already). The
    days' partitions there already go first, with whatever they hold. Returns seconds and
    rows."""
    prepare(engine)
    started = time.monotonic()
    chosen = sorted(days)
    drop(engine, chosen)  # a day made before (another scenario's, emptied by stack.reset)

    def one(numbered: tuple[int, date]) -> None:
        index, day = numbered
        _fill_day(engine, day, per_day, first + index * per_day, keys, documents)

    with ThreadPoolExecutor(CONNECTIONS) as pool:
        list(pool.map(one, enumerate(chosen)))
    return {"days": len(chosen), "events_per_day": per_day, "events": per_day * len(chosen),
            "seconds": round(time.monotonic() - started, 1)}


def _fill_day(engine: Engine, day: date, per_day: int, first: int, keys: bool,
              documents: bool) -> None:
    lower, upper = partitions.midnight(day), partitions.midnight(day + timedelta(days=1))
    names = {table.name: partitions.day_partition(table.name, day)
             for table, _key in partitions.TABLES}
    events, jobs, search = names["webhook_events"], names["jobs"], names["event_search"]
    bounds = {"lower": lower, "count": per_day, "first": first,
              "spacing": 86_400 / per_day}
    with engine.begin() as conn:
        conn.execute(sa.text(f"SET LOCAL maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'"))
        for (table, key), name in zip(partitions.TABLES, names.values(), strict=True):
            _create_apart(conn, table.name, key, name, lower, upper)
        conn.execute(sa.text(f"""
            INSERT INTO {events} (id, provider, source, event_id, event_type, payload,
                                  received_at, received_via, livemode, dedup_key)
            SELECT nextval(pg_get_serial_sequence('webhook_events', 'id')), 'stripe',
                   'stripe', event_id, event_type, payload || jsonb_build_object('id', event_id),
                   at, 'delivery', true, webhook_dedup_key('stripe', 'stripe', event_id)
            FROM ({ROWS}) AS r"""), bounds)
        conn.execute(sa.text(f"""
            INSERT INTO {jobs} (id, provider, source, event_id, event_type, status, attempts,
                                outcome, run_at, created_at, finished_at, held)
            SELECT nextval(pg_get_serial_sequence('jobs', 'id')), 'stripe', 'stripe',
                   event_id, event_type, 'done', 1, 'applied', at, at,
                   at + interval '40 milliseconds', false
            FROM ({ROWS}) AS r"""), bounds)
        if documents:
            conn.execute(sa.text(f"""
                INSERT INTO {search} (provider, source, event_id, received_at, document)
                SELECT 'stripe', 'stripe', event_id, at,
                       to_tsvector('simple', event_id) || document
                FROM ({ROWS}) AS r"""), bounds)
        if keys:
            conn.execute(sa.text(f"""
                INSERT INTO webhook_dedup (generation, key, source, event_id, received_at)
                SELECT (SELECT max(generation) FROM dedup_generations),
                       webhook_dedup_key('stripe', 'stripe', event_id), 'stripe', event_id, at
                FROM ({ROWS}) AS r ORDER BY n"""), bounds)
        for parent, name in names.items():
            _attach(conn, parent, name, lower, upper)


def _create_apart(conn: Connection, table: str, key: str, name: str, lower: datetime,
                  upper: datetime) -> None:
    """A day's table outside the partitioned one, with a CHECK of its bound (checked per row
    as it fills, and the proof that lets the attach skip its scan)."""
    conn.execute(sa.text(f"CREATE TABLE {name} "
                         f"(LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"))
    conn.execute(sa.text(
        f"ALTER TABLE {name} ADD CONSTRAINT {name}_bound "
        f"CHECK ({key} >= '{lower.isoformat()}' AND {key} < '{upper.isoformat()}')"))


def _attach(conn: Connection, table: str, name: str, lower: datetime, upper: datetime) -> None:
    conn.execute(sa.text(
        f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM "
        f"('{lower.isoformat()}') TO ('{upper.isoformat()}')"))
    conn.execute(sa.text(f"ALTER TABLE {name} DROP CONSTRAINT {name}_bound"))


def drop(engine: Engine, days: Iterable[date]) -> None:
    """The days' partitions (whatever rows they hold) detached and dropped."""
    with engine.begin() as conn:
        for day in days:
            for table, _key in partitions.TABLES:
                name = partitions.day_partition(table.name, day)
                if conn.execute(sa.text("SELECT to_regclass(:n)"), {"n": name}).scalar():
                    conn.execute(sa.text(f"ALTER TABLE {table.name} DETACH PARTITION {name}"))
                    conn.execute(sa.text(f"DROP TABLE {name}"))


def create_empty(engine: Engine, days: Iterable[date]) -> None:
    """Empty partitions for `days` (those not there yet), so that rows inserted into the
    partitioned tables for those days land in their day rather than the DEFAULT partition."""
    with engine.begin() as conn:
        for day in days:
            lower = partitions.midnight(day)
            upper = partitions.midnight(day + timedelta(days=1))
            for table, _key in partitions.TABLES:
                name = partitions.day_partition(table.name, day)
                if not conn.execute(sa.text("SELECT to_regclass(:n)"), {"n": name}).scalar():
                    conn.execute(sa.text(
                        f"CREATE TABLE {name} PARTITION OF {table.name} FOR VALUES FROM "
                        f"('{lower.isoformat()}') TO ('{upper.isoformat()}')"))


def forget_since(conn: Connection, last_event: int, last_job: int) -> None:
    """Delete the events after id `last_event` and the jobs after `last_job` (an arm's
    ingest), with their search documents and their dedup keys: the tables as they were."""
    conn.execute(sa.text("""
        DELETE FROM event_search s USING webhook_events e
        WHERE e.id > :id AND s.provider = e.provider AND s.source = e.source
          AND s.event_id = e.event_id AND s.received_at = e.received_at"""), {"id": last_event})
    conn.execute(sa.text("""
        DELETE FROM webhook_dedup d USING webhook_events e
        WHERE e.id > :id AND d.key = e.dedup_key"""), {"id": last_event})
    conn.execute(sa.text("DELETE FROM jobs WHERE id > :id"), {"id": last_job})
    conn.execute(sa.text("DELETE FROM webhook_events WHERE id > :id"), {"id": last_event})
