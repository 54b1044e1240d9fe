"""`python -m benchmarks.wal`: the WAL Postgres writes per ingested event and per applied
job, and the size per row of the indexes that deduplicate events: what bounds one Postgres
as the work grows (docs/scaling.md).

The WAL position is the server's, shared by every database on it, so by default this runs
on a private embedded Postgres (webhooks.embedded, the dev extra) that nothing else writes
to, started in a temporary folder and stopped at the end; `--admin-url` names another
server, whose figures are then only as clean as that server is quiet.

1. Ingest: `webhooks web` at 4 connections, no worker running, two windows one after the
   other, the first just after a CHECKPOINT (every page an insert touches first then goes
   to the WAL whole: a full-page image), the second later. Per acknowledged event: WAL
   bytes (pg_current_wal_lsn() before and after), WAL records and full-page images
   (pg_stat_wal).
2. Drain: the recorded events' jobs applied by one `webhooks worker` group, their emails
   sent (scaleout.drain): WAL per job.
3. Dedup: R events with Stripe-shaped ids (`evt_` and 24 random characters, random order)
   inserted set-based (their keys into webhook_dedup by its guard, as any writer's), then
   pg_relation_size of each index of webhook_events, jobs and webhook_dedup (summed over
   their partitions), per row: webhook_dedup's keys are kept DEDUP_HORIZON_DAYS, the
   events' and jobs' indexes go with their day's partitions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks import load, report, scaleout, stack

CONNECTIONS = 4
SECONDS = 5
DEDUP_ROWS = 500_000
DEDUP_TABLES = ("webhook_events", "jobs", "webhook_dedup")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="webhooks-bench-wal-"))
    with _server(args.admin_url) as admin_url:
        target = stack.prepare(admin_url, args.database, args.broker_url, logs)
        try:
            result: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                      "commit": report.code_commit(stack.ROOT),
                                      "cores": os.cpu_count(),
                                      "server": "private embedded" if not args.admin_url
                                      else "given",
                                      "load_average_start": stack.load_average()}
            # under one key: a run's "ingest" and the others mean the scenarios' results
            result["wal"] = {"ingest": ingest(target, args.seconds), "drain": drain(target),
                             "dedup": dedup(target, args.rows)}
            result["load_average_end"] = stack.load_average()
        finally:
            stack.drop(admin_url, args.database)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


@contextmanager
def _server(admin_url: str) -> Iterator[str]:
    """admin_url, or a private embedded Postgres for the length of the run."""
    if admin_url:
        yield admin_url
        return
    from webhooks import embedded

    folder = Path(tempfile.mkdtemp(prefix="webhooks-bench-wal-pg-"))
    try:
        yield embedded.start_postgres(folder)
    finally:
        embedded.stop_postgres(folder)
        shutil.rmtree(folder, ignore_errors=True)


def ingest(target: stack.Target, seconds: float) -> list[dict[str, Any]]:
    """Two windows of the ingest, the first right after a checkpoint."""
    stack.reset(target)  # ends with a CHECKPOINT
    windows = []
    with stack.web(target, name="web-wal") as (base, _):
        for label in ("after a checkpoint", "later"):
            before = _wal(target)
            result = load.closed_loop(base, CONNECTIONS, seconds, stack.STRIPE_SECRET)
            windows.append({"window": label, "acked": result.ok, "acked_per_s":
                            round(result.rps, 1), **_per(_wal(target), before, result.ok)})
            print(f"  ingest, {label}: {windows[-1]}", flush=True)
    return windows


def drain(target: stack.Target) -> dict[str, Any]:
    """The ingested events' jobs, applied by one worker group, emails included."""
    stack.flush_broker(target.broker_url)  # the web's wake-ups: the drain starts its own
    engine = target.engine()
    with engine.connect() as conn:
        jobs = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE status = 'pending'"
                                    )).scalar_one()
        conn.execute(sa.text("CHECKPOINT"))
        conn.commit()
    engine.dispose()
    before = _wal(target)
    row = scaleout.drain(target, jobs, 1, (), label="wal")
    result = {"jobs": jobs, "jobs_per_s": row["jobs_per_s"], **_per(_wal(target), before, jobs)}
    print(f"  drain: {result}", flush=True)
    return result


def dedup(target: stack.Target, rows: int) -> dict[str, Any]:
    """Index sizes per row with `rows` events (and their jobs) recorded."""
    stack.reset(target)
    engine = target.engine()
    started = time.monotonic()
    with engine.begin() as conn:
        conn.execute(sa.text("""
            INSERT INTO webhook_events (provider, source, event_id, event_type, payload)
            SELECT 'stripe', 'stripe', 'evt_' || left(md5(random()::text), 24),
                   'invoice.paid', '{}'::jsonb
            FROM generate_series(1, :rows)
            ON CONFLICT DO NOTHING
        """), {"rows": rows})
        conn.execute(sa.text("""
            INSERT INTO jobs (provider, source, event_id, event_type, status, created_at)
            SELECT provider, source, event_id, event_type, 'done', received_at
            FROM webhook_events
        """))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f"VACUUM ANALYZE {', '.join(DEDUP_TABLES)}"))
        recorded = conn.execute(sa.text("SELECT count(*) FROM webhook_events")).scalar_one()
        sizes = conn.execute(sa.text("""
            SELECT c.relname, (SELECT CAST(sum(pg_relation_size(relid)) AS bigint)
                               FROM pg_partition_tree(i.indexrelid)), t.relname
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            JOIN pg_class t ON t.oid = i.indrelid
            WHERE t.relname = ANY(:tables) ORDER BY 3, 1
        """), {"tables": list(DEDUP_TABLES)}).all()
        tables = {str(name): int(size) for name, size in conn.execute(sa.text("""
            SELECT relname, (SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree(oid))
            FROM pg_class WHERE relname = ANY(:tables) AND relkind IN ('r', 'p')
        """), {"tables": list(DEDUP_TABLES)})}
    engine.dispose()
    result = {"rows": recorded, "load_seconds": round(time.monotonic() - started, 1),
              "payload": "{} (the keys only: the search index holds the event id alone)",
              "tables_bytes_per_row": {name: round(size / recorded, 1)
                                       for name, size in tables.items()},
              "indexes": [{"index": name, "table": table, "mb": round(size / 2**20, 1),
                           "bytes_per_row": round(size / recorded, 1)}
                          for name, size, table in sizes]}
    print(f"  dedup: {result}", flush=True)
    return result


def _wal(target: stack.Target) -> dict[str, int]:
    engine = target.engine()
    with engine.connect() as conn:
        lsn, records, fpi = conn.execute(sa.text(
            "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, wal_records, wal_fpi "
            "FROM pg_stat_wal")).one()
    engine.dispose()
    return {"bytes": int(lsn), "records": int(records), "fpi": int(fpi)}


def _per(after: dict[str, int], before: dict[str, int], count: int) -> dict[str, Any]:
    """WAL bytes, records and full-page images between two readings, per unit of work."""
    count = max(count, 1)
    return {"wal_bytes": after["bytes"] - before["bytes"],
            "wal_bytes_per_unit": round((after["bytes"] - before["bytes"]) / count),
            "wal_records_per_unit": round((after["records"] - before["records"]) / count, 1),
            "fpi_per_unit": round((after["fpi"] - before["fpi"]) / count, 2)}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wal", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--admin-url", default="",
                        help="a Postgres URL (default: a private embedded Postgres)")
    parser.add_argument("--database", default="webhooks_bench_wal")
    parser.add_argument("--broker-url", default=os.environ.get(
        "BENCH_BROKER_URL", "redis://127.0.0.1:6379/9"),
        help="a Redis database the benchmark may flush (default db 9)")
    parser.add_argument("--seconds", type=float, default=SECONDS,
                        help="each ingest window")
    parser.add_argument("--rows", type=int, default=DEDUP_ROWS,
                        help="events loaded for the dedup index sizes")
    parser.add_argument("--out", default="", help="also write the result to this JSON file")
    return parser


if __name__ == "__main__":
    sys.exit(main())
