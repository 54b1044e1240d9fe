"""`python -m benchmarks.claim`: what the paused-source filter costs the worker's claim.

On a throwaway database: N pending jobs of a provider received first (the oldest, at the
head of the claim's order) and N of another. Times queries.JobClaimDue (claim 50, in a
transaction rolled back each time, so every claim sees the same rows) as the claim was
before the filter, with the filter and nothing paused, with the first provider's source
paused alone and with the first provider paused as a whole, each through
shared.pausing.pause (its N jobs held: out of the claim's range of the index), and with the
provider paused but its jobs not held (the anti-join alone skipping them, as before `held`,
and as a job recorded during a pause is until the sweeper holds it). Prints p50/p99 in ms
and the ratios to the claim with nothing paused; the target is 1.2 for a held backlog.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import sqlalchemy as sa

from benchmarks import stack
from webhooks.shared import pausing, queries
from webhooks.shared.db import driver_sql
from webhooks.shared.models import ALL_SOURCES

# The claim as it was before pausing existed: the same statement without the filter.
UNFILTERED = sa.text(str(queries.JobClaimDue.text).replace(
    queries.DUE, "status = 'pending' AND NOT held AND run_at <= now()"))


def seed(conn: Any, per_provider: int) -> None:
    for provider in ("stripe", "github"):
        conn.execute(sa.text("""
            INSERT INTO webhook_events (provider, source, event_id, event_type, payload)
            SELECT :p, :p, :p || '_' || n, 'invoice.paid',
                   jsonb_build_object('id', :p || '_' || n, 'data',
                       jsonb_build_object('object', jsonb_build_object(
                           'customer', 'cus_' || (n % 1000), 'currency', 'usd')))
            FROM generate_series(1, :n) AS n"""), {"p": provider, "n": per_provider})
        conn.execute(sa.text("""
            INSERT INTO jobs (provider, source, event_id, event_type, created_at)
            SELECT provider, source, event_id, event_type, received_at FROM webhook_events
            WHERE provider = :p ORDER BY id"""), {"p": provider})
    conn.execute(sa.text("ANALYZE"))


def time_claims(engine: sa.Engine, statement: sa.TextClause, rounds: int) -> list[float]:
    sql = driver_sql(statement)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        timings = []
        for _ in range(rounds):
            started = time.perf_counter()
            cursor.execute(sql, {"limit": 50})
            rows = cursor.fetchall()
            timings.append((time.perf_counter() - started) * 1000)
            raw.rollback()
            assert rows, "the claim found nothing"
        return timings
    finally:
        raw.close()


def summary(timings: list[float]) -> dict[str, float]:
    ordered = sorted(timings)
    return {"p50_ms": round(statistics.median(ordered), 3),
            "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1], 3)}


JOBS = 20_000
ROUNDS = 300
SMOKE = {"jobs": 2_000, "rounds": 30}
TARGET_HELD_OVER_NONE = 1.2


def run(target: stack.Target, jobs: int = JOBS, rounds: int = ROUNDS) -> dict[str, Any]:
    """`python -m benchmarks --only claim` (and, small, --smoke): the measure on the
    benchmark's own database, emptied before and after; with the ratio the target reads,
    the claim with the paused backlog held and vacuumed over the claim with none paused."""
    stack.reset(target)
    engine = target.engine()
    try:
        with engine.begin() as conn:
            seed(conn, jobs)
        results = measure(engine, jobs, rounds)
    finally:
        engine.dispose()
        stack.reset(target)
    base = results[NONE_PAUSED]["p50_ms"]
    held = results[f"{jobs:,} oldest's provider paused, held, vacuumed"]["p50_ms"]
    print(f"claim of 50 over {2 * jobs:,} pending jobs: none paused p50 {base:.3f} ms, "
          f"{jobs:,} paused and held p50 {held:.3f} ms (x{held / base:.2f})", flush=True)
    return {"jobs": jobs, "rounds": rounds, "claims": results,
            "held_over_none": round(held / base, 3), "target": TARGET_HELD_OVER_NONE}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=20_000, help="pending jobs per provider")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--database", default="webhooks_bench_claim",
                        help="the throwaway database (dropped and created again)")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/9",
                        help="emptied at start")
    args = parser.parse_args()
    target = stack.prepare(args.admin_url, args.database, args.broker_url,
                           stack.ROOT / ".bench-logs")
    try:
        results = run(target, args.jobs, args.rounds)["claims"]
    finally:
        stack.drop(args.admin_url, args.database)
    base = results[NONE_PAUSED]["p50_ms"]
    print(f"claim of 50 over {2 * args.jobs:,} pending jobs, {args.rounds} claims each:")
    for label, figures in results.items():
        print(f"  {label:<48} p50 {figures['p50_ms']:8.3f} ms  p99 {figures['p99_ms']:8.3f} ms"
              f"  x{figures['p50_ms'] / base:.2f}")


NONE_PAUSED = "filter, none paused"


def measure(engine: sa.Engine, jobs: int, rounds: int) -> dict[str, dict[str, float]]:
    results = {"before (no filter)": summary(time_claims(engine, UNFILTERED, rounds)),
               NONE_PAUSED: summary(time_claims(engine, queries.JobClaimDue, rounds))}
    for label, source in (("source", "stripe"), ("provider", None)):
        pausing.pause(engine, "stripe", source)
        results[f"{jobs:,} oldest's {label} paused, held"] = summary(
            time_claims(engine, queries.JobClaimDue, rounds))
        vacuum(engine)
        results[f"{jobs:,} oldest's {label} paused, held, vacuumed"] = summary(
            time_claims(engine, queries.JobClaimDue, rounds))
        pausing.resume(engine, "stripe", source)
        vacuum(engine)
    with engine.begin() as conn:
        conn.execute(queries.ProviderPause, {"provider": "stripe", "source": ALL_SOURCES})
    results[f"{jobs:,} oldest's provider paused, not held"] = summary(
        time_claims(engine, queries.JobClaimDue, rounds))
    return results


def vacuum(engine: sa.Engine) -> None:
    """What autovacuum does soon after a pause or resume of many jobs (holding them
    updates every row: the old index entries stay, dead, until a vacuum or until the
    claims' scans mark them), so each figure is measured both before and after it."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE jobs"))


if __name__ == "__main__":
    main()
