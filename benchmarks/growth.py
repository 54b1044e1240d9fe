"""`--only growth`: whether the ingest and the drain stay flat as history accumulates (SPEC,
"Growth: cost flat as history grows").

Two databases side by side: the benchmark's, which gets more and more days of history
behind today, and an empty one (`<database>_empty`, migrated alike, dropped at the end).
Each day of history is a day's partitions of `per_day` done events (Stripe-shaped, 1-2 KB)
with their jobs and dedup keys, filled the bulk-load way (benchmarks/history.py: no search
documents, which nothing measured here reads: a drained job's document goes to today's
partition). For each size:

1. history: the days added since the last size (the newest days first: a history of three
   days is the three days before today), VACUUM ANALYZE of them as autovacuum would have
   done, ANALYZE of the partitioned tables (partitions.maintain's) and a CHECKPOINT, so
   that neither statistics nor the fill's writes fall in a measurement;
2. ingest, `rounds` pairs of runs, the empty database and the one with history alternated
   (which goes first alternates too): `webhooks web` under the ingest scenario's load
   (closed loop, the same connections) for `ingest_seconds`, acked/s and p99, the web's and
   Postgres's CPU per delivery; then pgbench running ingest.sql (the same statement) for as
   long, the database's own rate. The machine's speed drifts by more than the history
   could move the ingest (results/README.md, "Comparing runs"), so each ratio to the empty
   database is the median of the pairs' ratios, each pair run minutes apart at most;
3. drain: the worker scenario's backlog (scenarios.seed_jobs) drained by one
   `webhooks worker` group (scaleout.drain), on the empty database then on the other;
4. what the ingest and the drain added is deleted (history.forget_since), so that each size
   starts from its history alone.

At the first size (no history) the two databases are alike: its ratios are the noise.
Targets at 10,000,000 events of history against the empty database: ingest rate >= 0.9,
p99 <= 1.2. Autovacuum may be off on a development server; the fill's VACUUM ANALYZE and
the seeding's do what it would have done by then.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchmarks import history, load, pgbench, scaleout, scenarios, stack
from webhooks.shared import partitions

HERE = Path(__file__).resolve().parent
TARGET_RATE_VS_EMPTY = 0.9  # SPEC: the ingest's rate at 10,000,000 events of history
TARGET_P99_VS_EMPTY = 1.2  # and its p99, each against an empty database


@dataclass(frozen=True)
class Plan:
    days: tuple[int, ...] = (0, 3, 30)  # days of history at each size
    per_day: int = 333_334  # events a day: 30 days are 10,000,020
    ingest_seconds: float = 10
    warmup_seconds: float = 2
    rounds: int = 5  # pairs of ingest and pgbench runs at each size; the median counts
    backlog: int = 20_000  # jobs drained at each size


SMOKE = Plan(days=(0, 2), per_day=2_000, ingest_seconds=2, warmup_seconds=0.5, rounds=1,
             backlog=1_000)


def run(target: stack.Target, plan: scenarios.Plan, growth: Plan) -> dict[str, Any]:
    stack.reset(target)
    empty = _empty_twin(target)
    engine, empty_engine = target.engine(), empty.engine()
    rows: list[dict[str, Any]] = []
    try:
        today = history.today(engine)
        for days in growth.days:
            had = rows[-1]["days"] if rows else 0
            rows.append(_size(engine, empty_engine, target, empty, plan, growth, days, today,
                              had))
            print_row(rows[-1])
        indexes = _indexes(engine)
        stack.reset(target)
        history.drop(engine, history.past_days(1, max(growth.days), today))
    finally:
        engine.dispose()
        empty_engine.dispose()
        stack.drop(_admin_url(target), _database(empty))
    return {"plan": asdict(growth), "connections": plan.connections, "sizes": rows,
            "indexes": indexes, "ratios": {str(row["rows"]): row["vs_empty"] for row in rows}}


def _empty_twin(target: stack.Target) -> stack.Target:
    """A migrated database beside the benchmark's, left empty, on the same broker."""
    twin = stack.prepare(_admin_url(target), f"{_database(target)}_empty", target.broker_url,
                         target.logs, target.code)
    os.environ.update(target.env)  # prepare() points this process at the twin
    return twin


def _admin_url(target: stack.Target) -> str:
    return sa.make_url(target.database_url).set(database="postgres").render_as_string(
        hide_password=False)


def _database(target: stack.Target) -> str:
    return str(sa.make_url(target.database_url).database)


def _size(engine: Engine, empty_engine: Engine, target: stack.Target, empty: stack.Target,
          plan: scenarios.Plan, growth: Plan, days: int, today: Any,
          had: int) -> dict[str, Any]:
    filled = _grow(engine, growth, had, days, today)
    pairs = []
    for n in range(1, growth.rounds + 1):
        arms = [("empty", empty_engine, empty), ("history", engine, target)]
        if n % 2 == 0:
            arms.reverse()
        pair = {arm: _ingest_round(arm_engine, arm_target, plan, growth,
                                   f"web-growth-{days}d-{arm}-{n}")
                for arm, arm_engine, arm_target in arms}
        pairs.append(pair)
    empty_drain = _drain(empty_engine, empty, plan, growth, label=f"growth-{days}d-empty")
    drained = _drain(engine, target, plan, growth, label=f"growth-{days}d")
    history_rounds = [pair["history"] for pair in pairs]
    empty_rounds = [pair["empty"] for pair in pairs]
    return {"days": days, "rows": days * growth.per_day, **filled, **_median(history_rounds),
            "ingest_rounds": history_rounds, **drained,
            "empty": {**_median(empty_rounds), "ingest_rounds": empty_rounds, **empty_drain},
            "vs_empty": _paired(pairs, drained, empty_drain)}


def _grow(engine: Engine, growth: Plan, had: int, days: int, today: Any) -> dict[str, Any]:
    """The days from `had` to `days` before today, filled; then vacuumed and analysed."""
    added = history.past_days(had + 1, days - had, today)
    fill: dict[str, Any] = {"seconds": 0.0}
    started = time.monotonic()
    if added:
        fill = history.fill(engine, added, growth.per_day, first=had * growth.per_day,
                            documents=False)
        stack.autocommit(engine, "VACUUM ANALYZE " + ", ".join(
            partitions.day_partition(table.name, day)
            for day in added for table, _key in partitions.TABLES))
    stack.autocommit(engine, *(f"ANALYZE {table.name}" for table, _key in partitions.TABLES),
                     "VACUUM ANALYZE webhook_dedup", "CHECKPOINT")
    sizes = _sizes(engine)
    print(f"  {days} days of history ({days * growth.per_day:,} events): {len(added)} days "
          f"filled in {fill['seconds']} s, vacuumed in "
          f"{time.monotonic() - started - fill['seconds']:.1f} s (events {sizes['events_mb']} "
          f"MB, jobs {sizes['jobs_mb']} MB, dedup {sizes['dedup_mb']} MB; load "
          f"{stack.load_average()})", flush=True)
    return {"fill_seconds": fill["seconds"], "days_filled": len(added),
            "fill_and_vacuum_seconds": round(time.monotonic() - started, 1), **sizes}


def _ingest_round(engine: Engine, target: stack.Target, plan: scenarios.Plan, growth: Plan,
                  name: str) -> dict[str, Any]:
    """One run of the web and one of pgbench, then their rows deleted."""
    last_event, last_job = _last_ids(engine)
    ingest = _ingest(target, plan, growth, name)
    reference = pgbench.run_ingest(target.database_url, plan.connections,
                                   seconds=growth.ingest_seconds)
    _forget(engine, last_event, last_job)
    return {**ingest, "pgbench_tps": round(reference.tps, 1) if reference else None,
            "pgbench_p99_ms": round(reference.p99_ms, 2) if reference else None,
            "ingest_ratio_to_pgbench": _ratio(ingest["ingest_acked_per_s"],
                                              reference.tps if reference else None)}


def _median(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round of median rate, and the median of each rate and p99 over the rounds."""
    middle = sorted(rounds, key=lambda run: run["ingest_acked_per_s"])[len(rounds) // 2]
    found = dict(middle)
    for key in ("ingest_acked_per_s", "ingest_p99_ms", "pgbench_tps", "pgbench_p99_ms"):
        values = [run[key] for run in rounds if run.get(key) is not None]
        found[key] = round(statistics.median(values), 2) if values else None
    return found


def _paired(pairs: list[dict[str, dict[str, Any]]], drained: dict[str, Any],
            empty_drain: dict[str, Any]) -> dict[str, Any]:
    """The history's figures ÷ the empty database's: the median over the pairs of rounds."""
    def median_ratio(key: str) -> float | None:
        ratios = [r for pair in pairs
                  if (r := _ratio(pair["history"].get(key), pair["empty"].get(key))) is not None]
        return round(statistics.median(ratios), 3) if ratios else None

    return {"ingest_rate_vs_empty": median_ratio("ingest_acked_per_s"),
            "ingest_p99_vs_empty": median_ratio("ingest_p99_ms"),
            "ingest_postgres_cpu_vs_empty": median_ratio("ingest_postgres_cpu_ms_per_ack"),
            "pgbench_vs_empty": median_ratio("pgbench_tps"),
            "pgbench_p99_vs_empty": median_ratio("pgbench_p99_ms"),
            "drain_vs_empty": _ratio(drained["drain_jobs_per_s"],
                                     empty_drain["drain_jobs_per_s"]),
            "ingest_rate_pairs": [_ratio(pair["history"]["ingest_acked_per_s"],
                                         pair["empty"]["ingest_acked_per_s"]) for pair in pairs],
            "ingest_p99_pairs": [_ratio(pair["history"]["ingest_p99_ms"],
                                        pair["empty"]["ingest_p99_ms"]) for pair in pairs]}


def _drain(engine: Engine, target: stack.Target, plan: scenarios.Plan, growth: Plan,
           label: str) -> dict[str, Any]:
    last_event, last_job = _last_ids(engine)
    stack.flush_broker(target.broker_url)  # the ingest's wake-ups would start the drain early
    scenarios.seed_jobs(target, growth.backlog)  # and VACUUM ANALYZE
    stack.autocommit(engine, "CHECKPOINT")
    engine.dispose()  # no connection of ours left open: drain() counts the workers' commits
    drained = scaleout.drain(target, growth.backlog, 1, plan.worker_args, label=label)
    _forget(engine, last_event, last_job)
    return {
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


def _forget(engine: Engine, last_event: int, last_job: int) -> None:
    """Today's rows of a measure deleted (the history's are all older), and what the drain
    applied; vacuumed, so that the next measure inserts where this one's rows were."""
    with engine.begin() as conn:
        history.forget_since(conn, last_event, last_job)
        conn.execute(sa.text("TRUNCATE webhook_duplicates, ledger_entries, outbox, accounts"))
    stack.autocommit(engine, "VACUUM ANALYZE webhook_events, jobs, event_search, webhook_dedup")


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


def _sizes(engine: Engine) -> dict[str, float]:
    """Each table's bytes over all its partitions, indexes included, in MB."""
    with engine.connect() as conn:
        events, jobs, dedup = conn.execute(sa.text("""
            SELECT (SELECT sum(pg_total_relation_size(relid))
                    FROM pg_partition_tree(CAST(t AS regclass)) WHERE isleaf)
            FROM unnest(ARRAY['webhook_events', 'jobs', 'webhook_dedup']) AS t""")).scalars()
    return {"events_mb": _mb(events), "jobs_mb": _mb(jobs), "dedup_mb": _mb(dedup)}


def _last_ids(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        event, job = conn.execute(sa.text(
            "SELECT (SELECT coalesce(max(id), 0) FROM webhook_events), "
            "(SELECT coalesce(max(id), 0) FROM jobs)")).one()
    return int(event), int(job)


def _indexes(engine: Engine) -> dict[str, list[str]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT tablename, indexname FROM pg_indexes WHERE tablename IN "
            "('webhook_events', 'jobs', 'webhook_dedup') ORDER BY 1, 2")).all()
    found: dict[str, list[str]] = {}
    for table, index in rows:
        found.setdefault(table, []).append(index)
    return found


def _mb(size: Any) -> float:
    return round(float(size or 0) / 2**20, 1)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a + b, 3)


def print_row(row: dict[str, Any]) -> None:
    """One size, as it finishes."""
    empty, ratios = row["empty"], row["vs_empty"]
    print(f"  {row['rows']:>10,} rows  ingest {row['ingest_acked_per_s']:8.1f} acked/s  "
          f"p99 {row['ingest_p99_ms']:7.2f} ms  (rounds "
          f"{[r['ingest_acked_per_s'] for r in row['ingest_rounds']]}; pgbench "
          f"{row['pgbench_tps']} tx/s; CPU ms/ack web {row['ingest_web_cpu_ms_per_ack']}, "
          f"Postgres {row['ingest_postgres_cpu_ms_per_ack']}; load "
          f"{row['ingest_load_average']})", flush=True)
    print(f"  {'empty':>15s} ingest {empty['ingest_acked_per_s']:8.1f} acked/s  "
          f"p99 {empty['ingest_p99_ms']:7.2f} ms  (rounds "
          f"{[r['ingest_acked_per_s'] for r in empty['ingest_rounds']]}; pgbench "
          f"{empty['pgbench_tps']} tx/s)", flush=True)
    print(f"  {'':>15s} ÷ empty, median of the pairs: rate {ratios['ingest_rate_vs_empty']} "
          f"{ratios['ingest_rate_pairs']}, p99 {ratios['ingest_p99_vs_empty']} "
          f"{ratios['ingest_p99_pairs']}, pgbench {ratios['pgbench_vs_empty']}", flush=True)
    print(f"  {'':>15s} drain  {row['drain_jobs_per_s']:8.1f} jobs/s   ({row['drain_jobs']:,} "
          f"in {row['drain_seconds']} s; CPU ms/job worker {row['drain_worker_cpu_ms_per_job']},"
          f" Postgres {row['drain_postgres_cpu_ms_per_job']}; empty "
          f"{empty['drain_jobs_per_s']} jobs/s; load {row['drain_load_average']})", flush=True)


def print_summary(result: dict[str, Any], targets: Mapping[str, float]) -> None:
    plan = result["plan"]
    print(f"growth  ingest ({result['connections']} connections, {plan['ingest_seconds']} s, "
          f"median of {plan['rounds']}) and drain ({plan['backlog']:,} jobs, one worker "
          f"group) with history already recorded ({plan['per_day']:,} events a day)")
    print(f"  {'rows':>10s} {'acked/s':>9s} {'p99 ms':>8s} {'pgbench':>8s} {'jobs/s':>8s} "
          f"{'events MB':>10s} {'dedup MB':>9s}")
    for row in result["sizes"]:
        print(f"  {row['rows']:>10,} {row['ingest_acked_per_s']:>9.1f} "
              f"{row['ingest_p99_ms']:>8.2f} {row['pgbench_tps'] or float('nan'):>8.1f} "
              f"{row['drain_jobs_per_s']:>8.1f} {row['events_mb']:>10.1f} "
              f"{row['dedup_mb']:>9.1f}")
    for rows, ratios in result["ratios"].items():
        print(f"  {int(rows):,} ÷ empty (median of the pairs): "
              + ", ".join(f"{k} {v}" for k, v in ratios.items()))
    print(f"  targets against the empty database: rate >= {TARGET_RATE_VS_EMPTY}, p99 <= "
          f"{TARGET_P99_VS_EMPTY}x; at every size: ingest >= {targets['ingest_rps']} acked/s, "
          f"p99 <= {targets['ingest_p99_ms']} ms")
