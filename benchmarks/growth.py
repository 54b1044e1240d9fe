"""`--only growth`: how the ingest and the drain slow down as history accumulates.

For each size (10,000, 100,000 and 1,000,000 rows), from an empty database:

1. history: that many Stripe-shaped events of 1-2 KB and their jobs, all done, loaded the
   way the search benchmark loads them (search.load_events: INSERT ... SELECT
   generate_series per table) and their search documents (event_search, migration 0017),
   its GIN index dropped during the load and built again after it, as a bulk load would;
   then ANALYZE and a CHECKPOINT,
   so that neither statistics nor a checkpoint's writes from the load fall in a measurement;
2. ingest: `webhooks web` under the ingest scenario's load (closed loop, same connections),
   acked/s and p99, the web's and Postgres's CPU per delivery, and pgbench running
   ingest.sql (the same statement) for as long, the database's own rate at that size;
3. drain: the ingest's rows deleted, the worker scenario's backlog seeded on top of the
   history (scenarios.seed_jobs) and drained by one `webhooks worker` group (scaleout.drain).

Autovacuum may be off on a development server; the load's VACUUM ANALYZE and the seeding's
do what it would have done by then. The result's `indexes` lists the indexes the tables had
(a search run before this one in the same invocation drops the search index).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchmarks import load, pgbench, scaleout, scenarios, search, stack

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)  # rows already present
    ingest_seconds: float = 10
    warmup_seconds: float = 2
    backlog: int = 20_000  # jobs drained at each size


SMOKE = Plan(sizes=(1_000, 10_000), ingest_seconds=2, warmup_seconds=0.5, backlog=1_000)


def run(target: stack.Target, plan: scenarios.Plan, growth: Plan) -> dict[str, Any]:
    engine = target.engine()
    try:
        rows = []
        for size in growth.sizes:
            rows.append(_size(engine, target, plan, growth, size))
            print_row(rows[-1])
        indexes = _indexes(engine)
    finally:
        engine.dispose()
    stack.reset(target)
    first, last = rows[0], rows[-1]
    return {"plan": asdict(growth), "connections": plan.connections, "sizes": rows,
            "indexes": indexes, "ratios": {
                "ingest_largest_over_smallest": _ratio(last["ingest_acked_per_s"],
                                                       first["ingest_acked_per_s"]),
                "pgbench_largest_over_smallest": _ratio(last["pgbench_tps"],
                                                        first["pgbench_tps"]),
                "drain_largest_over_smallest": _ratio(last["drain_jobs_per_s"],
                                                      first["drain_jobs_per_s"])}}


def _size(engine: Engine, target: stack.Target, plan: scenarios.Plan, growth: Plan,
          size: int) -> dict[str, Any]:
    stack.reset(target)
    history = _load_history(engine, size)
    print(f"  {size:,} rows loaded in {history['load_seconds']} s, search index built in "
          f"{history['index_build_seconds']} s (events {history['events_mb']} MB, jobs "
          f"{history['jobs_mb']} MB)", flush=True)
    last_event, last_job = _last_ids(engine)
    ingest = _ingest(target, plan, growth, name=f"web-growth-{size}")
    reference = pgbench.run(target.database_url, HERE / "ingest.sql", plan.connections,
                            seconds=growth.ingest_seconds)
    with engine.begin() as conn:  # the history again, as loaded
        conn.execute(sa.text("DELETE FROM jobs WHERE id > :id"), {"id": last_job})
        conn.execute(sa.text("DELETE FROM webhook_events WHERE id > :id"), {"id": last_event})
        conn.execute(sa.text("TRUNCATE webhook_duplicates"))
    stack.flush_broker(target.broker_url)  # the ingest's wake-ups would start the drain early
    scenarios.seed_jobs(target, growth.backlog)  # and VACUUM ANALYZE
    _autocommit(engine, "CHECKPOINT")
    engine.dispose()  # no connection of ours left open: drain() counts the workers' commits
    drained = scaleout.drain(target, growth.backlog, 1, plan.worker_args,
                             label=f"growth-{size}")
    return {
        "rows": size, **history, **ingest,
        "pgbench_tps": round(reference.tps, 1) if reference else None,
        "pgbench_p99_ms": round(reference.p99_ms, 2) if reference else None,
        "ingest_ratio_to_pgbench": _ratio(ingest["ingest_acked_per_s"],
                                          reference.tps if reference else None),
        "drain_jobs": growth.backlog, "drain_seconds": drained["seconds"],
        "drain_jobs_per_s": drained["jobs_per_s"],
        "drain_worker_cpu_ms_per_job": drained["workers_cpu_ms_per_job"],
        "drain_postgres_cpu_ms_per_job": _add(drained["postgres_backends_cpu_ms_per_job"],
                                              drained["postgres_background_cpu_ms_per_job"]),
        "drain_commits_per_job": drained["commits_per_job"],
        "drain_measured_cores": drained["measured_cores"],
        "drain_machine_busy_cores": drained["machine_busy_cores"],
        "drain_failed": drained["failed"], "drain_load_average": drained["load_average"],
    }


def _load_history(engine: Engine, size: int) -> dict[str, Any]:
    """`size` done events and jobs (search.load_events) and their search documents
    (search.fill_documents), the search index built after the rows rather than kept up to
    date row by row during the load."""
    with engine.connect() as conn:
        definition = conn.execute(sa.text(
            "SELECT indexdef FROM pg_indexes WHERE indexname = :name"),
            {"name": search.SEARCH_INDEX}).scalar_one_or_none()
    if definition:
        _autocommit(engine, f"DROP INDEX {search.SEARCH_INDEX}")
    loaded = search.load_events(engine, size, unfinished=False)
    started = time.monotonic()
    search.fill_documents(engine)
    if definition:
        _autocommit(engine, "SET maintenance_work_mem = '1GB'", definition)
    build = time.monotonic() - started
    _autocommit(engine, "ANALYZE webhook_events", "ANALYZE event_search", "CHECKPOINT")
    with engine.connect() as conn:
        events, jobs = conn.execute(sa.text(
            "SELECT pg_total_relation_size('webhook_events'), pg_total_relation_size('jobs')"
        )).one()
    return {"load_seconds": loaded["seconds"],
            "index_build_seconds": round(build, 1) if definition else None,
            "events_mb": round(events / 2**20, 1), "jobs_mb": round(jobs / 2**20, 1),
            "payload_bytes": loaded["payload_bytes"]}


def _ingest(target: stack.Target, plan: scenarios.Plan, growth: Plan,
            name: str) -> dict[str, Any]:
    """The ingest scenario's closed loop, shorter, with the CPU of web and Postgres."""
    with scenarios._web(target, plan, name=name) as (base, web):
        load.closed_loop(base, plan.connections, growth.warmup_seconds, stack.STRIPE_SECRET,
                         plan.prefer_wrk)
        loadavg = stack.load_average()
        servers = stack.server_cpu(target)
        servers.start()
        web_before = web.cpu_seconds()
        with servers.sampling():
            result = load.closed_loop(base, plan.connections, growth.ingest_seconds,
                                      stack.STRIPE_SECRET, plan.prefer_wrk)
        web_cpu = web.cpu_seconds() - web_before
        postgres = servers.seconds()
    acked = max(result.ok, 1)
    postgres_cpu = (sum(postgres.get(kind, 0.0) for kind in ("postgres_backends",
                                                             "postgres_background"))
                    if "postgres_backends" in postgres else None)
    return {"ingest_tool": result.tool, "ingest_acked_per_s": round(result.rps, 1),
            "ingest_p50_ms": round(result.p50_ms, 2), "ingest_p99_ms": round(result.p99_ms, 2),
            "ingest_errors": result.errors,
            "ingest_web_cpu_ms_per_ack": round(web_cpu * 1000 / acked, 3),
            "ingest_postgres_cpu_ms_per_ack": round(postgres_cpu * 1000 / acked, 3)
            if postgres_cpu is not None else None,
            "ingest_load_average": loadavg}


def _last_ids(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        event, job = conn.execute(sa.text(
            "SELECT (SELECT coalesce(max(id), 0) FROM webhook_events), "
            "(SELECT coalesce(max(id), 0) FROM jobs)")).one()
    return int(event), int(job)


def _indexes(engine: Engine) -> dict[str, list[str]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT tablename, indexname FROM pg_indexes "
            "WHERE tablename IN ('webhook_events', 'jobs') ORDER BY 1, 2")).all()
    found: dict[str, list[str]] = {}
    for table, index in rows:
        found.setdefault(table, []).append(index)
    return found


def _autocommit(engine: Engine, *statements: str) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for statement in statements:
            conn.execute(sa.text(statement))


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a + b, 3)


def print_row(row: dict[str, Any]) -> None:
    """One size, as it finishes."""
    print(f"  {row['rows']:>9,} rows  ingest {row['ingest_acked_per_s']:8.1f} acked/s  "
          f"p99 {row['ingest_p99_ms']:7.2f} ms  (pgbench {row['pgbench_tps']} tx/s; CPU "
          f"ms/ack web {row['ingest_web_cpu_ms_per_ack']}, Postgres "
          f"{row['ingest_postgres_cpu_ms_per_ack']}; load {row['ingest_load_average']})",
          flush=True)
    print(f"  {'':>14s} drain  {row['drain_jobs_per_s']:8.1f} jobs/s   ({row['drain_jobs']:,} "
          f"in {row['drain_seconds']} s; CPU ms/job worker {row['drain_worker_cpu_ms_per_job']},"
          f" Postgres {row['drain_postgres_cpu_ms_per_job']}; load "
          f"{row['drain_load_average']})", flush=True)


def print_summary(result: dict[str, Any], targets: Mapping[str, float]) -> None:
    print(f"growth  ingest ({result['connections']} connections, "
          f"{result['plan']['ingest_seconds']} s) and drain ({result['plan']['backlog']:,} jobs, "
          f"one worker group) with history already recorded")
    print(f"  {'rows':>9s} {'acked/s':>9s} {'p99 ms':>8s} {'pgbench':>8s} {'jobs/s':>8s} "
          f"{'events MB':>10s}")
    for row in result["sizes"]:
        print(f"  {row['rows']:>9,} {row['ingest_acked_per_s']:>9.1f} "
              f"{row['ingest_p99_ms']:>8.2f} {row['pgbench_tps'] or float('nan'):>8.1f} "
              f"{row['drain_jobs_per_s']:>8.1f} {row['events_mb']:>10.1f}")
    ratios = result["ratios"]
    print(f"  largest / smallest: ingest {ratios['ingest_largest_over_smallest']}, pgbench "
          f"{ratios['pgbench_largest_over_smallest']}, drain "
          f"{ratios['drain_largest_over_smallest']}")
    print(f"  targets at every size: ingest >= {targets['ingest_rps']} acked/s, p99 <= "
          f"{targets['ingest_p99_ms']} ms; drain >= {targets['worker_jobs_per_s']} jobs/s")
