"""`--only retention`: what retention costs now that it drops whole days
(shared.partitions.prune) against the previous release's row deletes, what a prune costs
the ingest beside it, and what the dedup keys cost per event kept.

On the benchmark's database, one day of N done events well past RETENTION_DAYS (with their
jobs, search documents and dedup keys: benchmarks/history.py), VACUUM ANALYZEd as
autovacuum would have left a day that old, then:

1. drop: a CHECKPOINT, then shared.partitions.prune (the day's three partitions detached
   and dropped in one transaction): seconds and WAL bytes;
2. row deletes: the same rows made again, a CHECKPOINT, then the previous release's
   statement (OLD_DELETE) in transactions of BATCH rows until none is left, as its
   retention.prune ran it: seconds (the statements' and commits') and WAL bytes; and the
   VACUUM of the day's tables that those deletes leave to autovacuum, apart;
3. ingest beside a prune: the rows made a third time, then a steady ingest (RATE deliveries
   a second through shared.recording.record_event, the ingest's own statement, on an
   autocommit engine, from a pool of threads) for BASELINE seconds without a prune and on
   while shared.partitions.prune runs; each delivery's latency from the moment it was due
   (a delivery that waits for a thread counts its wait): p50 / p99 / max of each window and
   the ratio of the p99s;
4. the nightly shape: a day of `nightly_share` of N events straddling the cutoff (the day
   RETENTION_DAYS ago, not yet wholly past it), pruned: what the prune deletes row by row
   (partitions.prune's pass over the rows no dropped day held) and its WAL;
5. dedup: pg_total_relation_size of webhook_dedup (every partition, its indexes included)
   per key, beside the previous release's 252 bytes per event in its unique indexes
   (docs/scaling.md, "The dedup index over the retention window").

WAL is read as this database's: the records between two WAL positions (pg_walinspect) that
touch its relations or belong to a transaction that did, so that other databases' writes on
a shared server do not count; the server's whole WAL between the same positions beside it.
Without pg_walinspect (or when a checkpoint recycled the segments first) only the server's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchmarks import history, stack
from benchmarks.events import invoice_body
from benchmarks.load import percentile
from webhooks.shared import db, partitions, recording
from webhooks.shared.models import JobStatus
from webhooks.shared.settings import Settings

PREVIOUS_DEDUP_BYTES_PER_EVENT = 252  # docs/scaling.md: the previous release's unique keys
BATCH = 1000  # rows per transaction of the previous release's retention.prune
INSPECT_LIMIT_BYTES = 256 * 2**20  # a larger range is read as the server's WAL only

# The previous release's retention statement (`git show 895c865:shared/queries.py`,
# EventDeleteFinished), changed only as far as the new tables need: its jobs went with
# their event by the foreign key's ON DELETE CASCADE, which a partitioned table cannot have
# (migration 0023), so they are deleted here in the same statement; and each delete names
# the day (created_at, received_at), so that a row's delete probes its own day's index, as
# the unpartitioned table's one index took it.
OLD_DELETE = sa.text(f"""
    WITH old AS (
        SELECT j.provider, j.source, j.event_id, j.created_at FROM jobs j
        WHERE j.status = '{JobStatus.DONE}'
          AND j.finished_at < now() - make_interval(days => :days)
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), unsearched AS (
        DELETE FROM event_search s USING old
        WHERE s.provider = old.provider AND s.source = old.source AND s.event_id = old.event_id
          AND s.received_at = old.created_at
    ), cascaded AS (
        DELETE FROM jobs j USING old
        WHERE j.provider = old.provider AND j.source = old.source AND j.event_id = old.event_id
          AND j.created_at = old.created_at
    ), deleted AS (
        DELETE FROM webhook_events e USING old
        WHERE e.provider = old.provider AND e.source = old.source AND e.event_id = old.event_id
          AND e.received_at = old.created_at
        RETURNING 1
    )
    SELECT count(*) FROM deleted
""")

# This database's share of the WAL between two positions: records on its relations, and
# the records (commits, locks) of the transactions that wrote those.
DatabaseWal = sa.text(r"""
    WITH wal AS (
        SELECT xid, record_length, fpi_length,
               block_ref ~ ('rel \d+/' || (SELECT oid FROM pg_database
                                           WHERE datname = current_database()) || '/') AS ours
        FROM pg_get_wal_records_info(CAST(:start AS pg_lsn), CAST(:end AS pg_lsn))
    ), writers AS (SELECT DISTINCT xid FROM wal WHERE ours AND xid <> '0')
    SELECT coalesce(sum(record_length), 0), count(*), coalesce(sum(fpi_length), 0)
    FROM wal WHERE ours OR xid IN (SELECT xid FROM writers)
""")


@dataclass(frozen=True)
class Plan:
    events: int = 1_000_000  # one day's
    retention_days: int = 30
    horizon_days: int = 90  # DEDUP_HORIZON_DAYS: no generation is old enough to go
    rate: int = 200  # deliveries a second beside the prune
    threads: int = 8
    baseline_seconds: float = 10
    nightly_share: float = 0.1  # the straddling day's events, a share of `events`


SMOKE = Plan(events=5_000, rate=50, threads=4, baseline_seconds=2, nightly_share=0.5)


def run(target: stack.Target, plan: Plan) -> dict[str, Any]:
    stack.reset(target)
    engine = target.engine()
    try:
        return _run(engine, target, plan)
    finally:
        engine.dispose()
        stack.reset(target)


def _run(engine: Engine, target: stack.Target, plan: Plan) -> dict[str, Any]:
    inspecting = stack.create_extension(engine, "pg_walinspect")
    today = history.today(engine)
    day = today - timedelta(days=plan.retention_days + 10)
    result: dict[str, Any] = {"plan": asdict(plan), "day": day.isoformat(),
                              "wal_read_as": "database" if inspecting else "server"}
    result["fill"] = _fill(engine, day, plan.events, keys=True)
    result["drop"] = _drop(engine, plan, inspecting)
    print_part("drop", result["drop"])
    result["fill_again"] = _fill(engine, day, plan.events, keys=False)
    result["row_deletes"] = _row_deletes(engine, plan, day, inspecting)
    print_part("row deletes", result["row_deletes"])
    result["ratios"] = _ratios(result["drop"], result["row_deletes"])
    result["fill_third"] = _fill(engine, day, plan.events, keys=False)
    result["ingest"] = _ingest_beside_prune(engine, target, plan)
    result["nightly"] = _nightly(engine, plan, today, inspecting)
    result["dedup"] = _dedup(engine)
    result["load_average_end"] = stack.load_average()
    return result


def _fill(engine: Engine, day: date, events: int, *, keys: bool,
          first: int = 0) -> dict[str, Any]:
    """The day's rows (their keys too, the first time), then what autovacuum would have done
    to a day that old, and a CHECKPOINT: no fill's writes left for a measure to pay."""
    loadavg = stack.load_average()
    filled = history.fill(engine, [day], events, first=first, keys=keys)
    started = time.monotonic()
    stack.autocommit(engine, "VACUUM ANALYZE " + ", ".join(
        partitions.day_partition(table.name, day) for table, _key in partitions.TABLES),
        "CHECKPOINT")
    print(f"  {events:,} events on {day} in {filled['seconds']} s, vacuumed in "
          f"{time.monotonic() - started:.1f} s (load {loadavg})", flush=True)
    return {**filled, "vacuum_seconds": round(time.monotonic() - started, 1),
            "load_average": loadavg}


# --- 1. drop -------------------------------------------------------------------------------


def _drop(engine: Engine, plan: Plan, inspecting: bool) -> dict[str, Any]:
    loadavg = stack.load_average()
    pruned, seconds, wal = _measured_prune(engine, plan, inspecting)
    if pruned.events != plan.events:
        raise RuntimeError(f"the prune removed {pruned.events} events, not {plan.events}")
    return {"events": pruned.events, "partitions": pruned.partitions, "kept": pruned.kept,
            "seconds": round(seconds, 3), "wal": wal,
            "wal_bytes_per_event": _per(wal["bytes"], pruned.events),
            "load_average": loadavg}


def _measured_prune(engine: Engine, plan: Plan, inspecting: bool,
                    ) -> tuple[partitions.Pruned, float, dict[str, Any]]:
    """partitions.prune right after a CHECKPOINT: what it removed, its seconds, its WAL."""
    stack.autocommit(engine, "CHECKPOINT")
    start = _position(engine)
    started = time.monotonic()
    pruned = partitions.prune(engine, plan.retention_days, plan.horizon_days)
    seconds = time.monotonic() - started
    return pruned, seconds, _wal(engine, start, _position(engine), inspecting)


# --- 2. the previous release's row deletes ---------------------------------------------------


def _row_deletes(engine: Engine, plan: Plan, day: date, inspecting: bool) -> dict[str, Any]:
    loadavg = stack.load_average()
    stack.autocommit(engine, "CHECKPOINT")
    start = _position(engine)
    deleted, batches, seconds = 0, 0, 0.0
    database = _Sum(inspecting)
    while True:
        before = _position(engine) if inspecting else ""
        started = time.monotonic()
        with engine.begin() as conn:
            count = conn.execute(OLD_DELETE, {"days": plan.retention_days,
                                              "limit": BATCH}).scalar_one()
        seconds += time.monotonic() - started
        if inspecting:
            database.add(_wal(engine, before, _position(engine), True))
        deleted, batches = deleted + count, batches + 1
        if count < BATCH:
            break
    wal = {**database.total(), "server_bytes": _server_bytes(engine, start, _position(engine))}
    wal["bytes"] = wal["database_bytes"] if "database_bytes" in wal else wal["server_bytes"]
    if deleted != plan.events:
        raise RuntimeError(f"the row deletes removed {deleted} events, not {plan.events}")
    vacuum = _vacuum(engine, day, inspecting)
    history.drop(engine, [day])
    return {"events": deleted, "batch": BATCH, "batches": batches, "seconds": round(seconds, 3),
            "wal": wal,
            "wal_bytes_per_event": _per(wal["bytes"], deleted), "vacuum": vacuum,
            "load_average": loadavg}


def _vacuum(engine: Engine, day: date, inspecting: bool) -> dict[str, Any]:
    """The VACUUM that the deletes leave for autovacuum to run on the day's tables."""
    start = _position(engine)
    started = time.monotonic()
    stack.autocommit(engine, "VACUUM " + ", ".join(
        partitions.day_partition(table.name, day) for table, _key in partitions.TABLES))
    seconds = time.monotonic() - started
    return {"seconds": round(seconds, 3), "wal": _wal(engine, start, _position(engine),
                                                      inspecting)}


def _ratios(drop: dict[str, Any], rows: dict[str, Any]) -> dict[str, Any]:
    return {"seconds_rows_over_drop": _ratio(rows["seconds"], drop["seconds"]),
            "wal_rows_over_drop": _ratio(rows["wal"]["bytes"], drop["wal"]["bytes"]),
            "wal_rows_and_vacuum_over_drop": _ratio(
                rows["wal"]["bytes"] + rows["vacuum"]["wal"]["bytes"], drop["wal"]["bytes"])}


# --- 3. the ingest beside a prune -------------------------------------------------------------


def _ingest_beside_prune(engine: Engine, target: stack.Target, plan: Plan) -> dict[str, Any]:
    settings = Settings.from_env(target.env)
    ingest = db.create_engine(settings, pool_size=plan.threads, autocommit=True)
    loadavg = stack.load_average()
    try:
        with _steady_ingest(ingest, plan.rate, plan.threads) as deliveries:
            time.sleep(plan.baseline_seconds)
            prune_started = time.monotonic()
            pruned = partitions.prune(engine, plan.retention_days, plan.horizon_days)
            prune_ended = time.monotonic()
    finally:
        ingest.dispose()
    if pruned.events != plan.events:
        raise RuntimeError(f"the prune removed {pruned.events} events, not {plan.events}")
    without = _window(deliveries, prune_started - plan.baseline_seconds, prune_started)
    during = _window(deliveries, prune_started, prune_ended)
    result = {"rate": plan.rate, "threads": plan.threads, "without_prune": without,
              "during_prune": during, "prune_seconds": round(prune_ended - prune_started, 3),
              "p99_during_over_without": _ratio(during.get("p99_ms"), without.get("p99_ms")),
              "load_average": loadavg}
    print(f"  ingest at {plan.rate}/s: without a prune p99 {without.get('p99_ms')} ms, during "
          f"the prune ({result['prune_seconds']} s) p99 {during.get('p99_ms')} ms, max "
          f"{during.get('max_ms')} ms: x{result['p99_during_over_without']} (load {loadavg})",
          flush=True)
    return result


@contextmanager
def _steady_ingest(engine: Engine, rate: int, threads: int) -> Iterator[list[tuple[float, float]]]:
    """`rate` deliveries a second through record_event until the block ends; yields
    (when due, latency ms) of each, latency counted from when it was due."""
    done: list[tuple[float, float]] = []
    stop = threading.Event()
    prefix = f"ret{time.time_ns()}"

    def deliver(n: int, due: float) -> None:
        event_id = f"evt_{prefix}_{n}"
        recording.record_event(engine, "stripe", event_id, "invoice.paid",
                               invoice_body(event_id, n))
        done.append((due, (time.monotonic() - due) * 1000))

    def schedule(pool: ThreadPoolExecutor) -> None:
        started, n = time.monotonic(), 0
        while not stop.is_set():
            due = started + n / rate
            time.sleep(max(0.0, due - time.monotonic()))
            pool.submit(deliver, n, due)
            n += 1

    with ThreadPoolExecutor(threads) as pool:
        scheduler = threading.Thread(target=schedule, args=(pool,), daemon=True)
        scheduler.start()
        try:
            yield done
        finally:
            stop.set()
            scheduler.join(10)


def _window(deliveries: list[tuple[float, float]], start: float, end: float) -> dict[str, Any]:
    latencies = [ms for due, ms in deliveries if start <= due < end]
    if not latencies:
        return {"deliveries": 0}
    return {"deliveries": len(latencies), "p50_ms": round(percentile(latencies, 50), 2),
            "p99_ms": round(percentile(latencies, 99), 2), "max_ms": round(max(latencies), 2)}


# --- 4. the nightly shape ---------------------------------------------------------------------


def _nightly(engine: Engine, plan: Plan, today: date, inspecting: bool) -> dict[str, Any]:
    """A prune at this time of day, with the day RETENTION_DAYS ago partly past the cutoff:
    that day stays (its partition is not wholly past it); what the prune removes of it, it
    removes row by row."""
    day = today - timedelta(days=plan.retention_days)
    events = max(1, round(plan.events * plan.nightly_share))
    fill = _fill(engine, day, events, keys=True, first=plan.events)
    with engine.connect() as conn:
        past_cutoff = conn.execute(sa.text(
            "SELECT count(*) FROM jobs WHERE created_at >= :lower AND created_at < :upper "
            "AND finished_at < now() - make_interval(days => :days)"),
            {"lower": partitions.midnight(day), "upper": partitions.midnight(
                day + timedelta(days=1)), "days": plan.retention_days}).scalar_one()
    pruned, seconds, wal = _measured_prune(engine, plan, inspecting)
    history.drop(engine, [day])
    result = {"day": day.isoformat(), "events": events, "fill": fill,
              "past_cutoff": past_cutoff, "removed": pruned.events,
              "partitions_dropped": pruned.partitions, "seconds": round(seconds, 3),
              "wal": wal, "wal_bytes_per_removed": _per(wal["bytes"], pruned.events)}
    print(f"  nightly: of {events:,} events on {day}, {past_cutoff:,} past the cutoff; the "
          f"prune removed {pruned.events:,} ({pruned.partitions} partitions dropped) in "
          f"{result['seconds']} s, WAL {wal['bytes']:,} bytes", flush=True)
    return result


# --- 5. dedup -------------------------------------------------------------------------------


def _dedup(engine: Engine) -> dict[str, Any]:
    stack.autocommit(engine, "VACUUM ANALYZE webhook_dedup")
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT count(*) FROM webhook_dedup")).scalar_one()
        total, heap = conn.execute(sa.text("""
            SELECT sum(pg_total_relation_size(relid)), sum(pg_relation_size(relid))
            FROM pg_partition_tree('webhook_dedup') WHERE isleaf""")).one()
        indexes = conn.execute(sa.text("""
            SELECT c.relname, (SELECT sum(pg_relation_size(relid))
                               FROM pg_partition_tree(i.indexrelid))
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = CAST('webhook_dedup' AS regclass) ORDER BY 1""")).all()
    per_event = _per(int(total), rows)
    result = {"rows": rows, "bytes": int(total), "bytes_per_event": per_event,
              "heap_bytes_per_event": _per(int(heap), rows),
              "indexes": {str(name): _per(int(size), rows) for name, size in indexes},
              "previous_bytes_per_event": PREVIOUS_DEDUP_BYTES_PER_EVENT,
              "over_previous": _ratio(per_event, PREVIOUS_DEDUP_BYTES_PER_EVENT)}
    print(f"  dedup: {rows:,} keys, {per_event} bytes each (heap {result['heap_bytes_per_event']},"
          f" indexes {result['indexes']}), x{result['over_previous']} of "
          f"{PREVIOUS_DEDUP_BYTES_PER_EVENT}", flush=True)
    return result


# --- WAL ------------------------------------------------------------------------------------


def _position(engine: Engine) -> str:
    """The WAL flushed so far: every record of a transaction committed before is in it."""
    with engine.connect() as conn:
        return str(conn.execute(sa.text("SELECT pg_current_wal_flush_lsn()")).scalar_one())


def _server_bytes(engine: Engine, start: str, end: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(
            "SELECT pg_wal_lsn_diff(CAST(:end AS pg_lsn), CAST(:start AS pg_lsn))"),
            {"start": start, "end": end}).scalar_one())


def _wal(engine: Engine, start: str, end: str, inspecting: bool) -> dict[str, Any]:
    """The WAL between two positions: the server's, and this database's where it can be read
    (`bytes`: this database's, else the server's)."""
    server = _server_bytes(engine, start, end)
    found: dict[str, Any] = {"server_bytes": server}
    if inspecting and server <= INSPECT_LIMIT_BYTES:
        try:
            with engine.connect() as conn:
                total, records, fpi = conn.execute(DatabaseWal,
                                                   {"start": start, "end": end}).one()
            found.update(database_bytes=int(total), records=int(records),
                         fpi_bytes=int(fpi))
        except sa.exc.DBAPIError as error:  # a segment recycled by a checkpoint meanwhile
            found["database_unread"] = str(error.orig).splitlines()[0]
    found["bytes"] = found.get("database_bytes", server)
    return found


class _Sum:
    """This database's WAL over many ranges; unknown once one range could not be read."""

    def __init__(self, inspecting: bool) -> None:
        self.known = inspecting
        self.bytes = self.records = self.fpi = 0

    def add(self, wal: dict[str, Any]) -> None:
        if "database_bytes" not in wal:
            self.known = False
            return
        self.bytes += wal["database_bytes"]
        self.records += wal["records"]
        self.fpi += wal["fpi_bytes"]

    def total(self) -> dict[str, Any]:
        if not self.known:
            return {}
        return {"database_bytes": self.bytes, "records": self.records, "fpi_bytes": self.fpi}


# --- helpers ----------------------------------------------------------------------------------


def _per(amount: float | None, count: int) -> float | None:
    return None if amount is None or not count else round(amount / count, 1)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def print_part(name: str, part: dict[str, Any]) -> None:
    wal = part["wal"]
    print(f"  {name}: {part['events']:,} events in {part['seconds']} s, WAL {wal['bytes']:,} "
          f"bytes ({part['wal_bytes_per_event']} per event; the server's "
          f"{wal['server_bytes']:,}) (load {part['load_average']})", flush=True)


def print_summary(result: dict[str, Any]) -> None:
    drop, rows, ratios = result["drop"], result["row_deletes"], result["ratios"]
    ingest, dedup = result["ingest"], result["dedup"]
    print(f"retention  one day of {drop['events']:,} done events (WAL read as the "
          f"{result['wal_read_as']}'s)")
    print(f"  {'':28s} {'seconds':>9s} {'WAL bytes':>14s} {'per event':>10s}")
    print(f"  {'drop (partitions.prune)':28s} {drop['seconds']:>9.3f} "
          f"{drop['wal']['bytes']:>14,} {drop['wal_bytes_per_event']:>10}")
    print(f"  {'row deletes (previous)':28s} {rows['seconds']:>9.3f} "
          f"{rows['wal']['bytes']:>14,} {rows['wal_bytes_per_event']:>10}")
    print(f"  {'  then VACUUM':28s} {rows['vacuum']['seconds']:>9.3f} "
          f"{rows['vacuum']['wal']['bytes']:>14,}")
    print(f"  rows ÷ drop: seconds x{ratios['seconds_rows_over_drop']}, WAL "
          f"x{ratios['wal_rows_over_drop']} (with the VACUUM x"
          f"{ratios['wal_rows_and_vacuum_over_drop']})")
    print(f"  ingest at {ingest['rate']}/s: p99 {ingest['without_prune'].get('p99_ms')} ms "
          f"without a prune, {ingest['during_prune'].get('p99_ms')} ms during one "
          f"({ingest['prune_seconds']} s): x{ingest['p99_during_over_without']}")
    nightly = result["nightly"]
    print(f"  nightly: {nightly['removed']:,} rows of the day straddling the cutoff removed "
          f"row by row, WAL {nightly['wal']['bytes']:,} bytes")
    print(f"  dedup: {dedup['bytes_per_event']} bytes per key kept, x{dedup['over_previous']} "
          f"of the previous release's {dedup['previous_bytes_per_event']}")
