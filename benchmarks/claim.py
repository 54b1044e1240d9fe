"""`python -m benchmarks.claim`: what the paused-source filter costs the worker's claim.

On a throwaway database: N pending jobs of a provider received first (the oldest, at the
head of the claim's order) and N of another. Times queries.JobClaimDue (claim 50, in a
transaction rolled back each time, so every claim sees the same rows) as the claim was
before the filter, with the filter and nothing paused, with the first provider's source
paused alone, and with the first provider paused as a whole (its N jobs are then skipped
by every claim). Prints p50/p99 in ms and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import sqlalchemy as sa

from benchmarks import stack
from shared import queries
from shared.db import driver_sql
from shared.models import ALL_SOURCES

# The claim as it was before pausing existed: the same statement without the filter.
UNFILTERED = sa.text(str(queries.JobClaimDue.text).replace(
    queries.DUE, "status = 'pending' AND run_at <= now()"))


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
            INSERT INTO jobs (provider, source, event_id, event_type)
            SELECT provider, source, event_id, event_type FROM webhook_events WHERE provider = :p
            ORDER BY id"""), {"p": provider})
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=20_000, help="pending jobs per provider")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    name = "webhooks_bench_claim"
    target = stack.prepare(args.admin_url, name, "redis://127.0.0.1:6379/9",
                           stack.ROOT / ".bench-logs")
    engine = target.engine()
    try:
        with engine.begin() as conn:
            seed(conn, args.jobs)
        results = {"before (no filter)": summary(time_claims(engine, UNFILTERED, args.rounds)),
                   "filter, none paused": summary(time_claims(engine, queries.JobClaimDue,
                                                              args.rounds))}
        for label, source in (("source", "stripe"), ("provider", ALL_SOURCES)):
            with engine.begin() as conn:
                conn.execute(sa.text("DELETE FROM paused_providers"))
                conn.execute(queries.ProviderPause, {"provider": "stripe", "source": source})
            results[f"filter, {args.jobs:,} oldest's {label} paused"] = summary(
                time_claims(engine, queries.JobClaimDue, args.rounds))
    finally:
        engine.dispose()
        stack.drop(args.admin_url, name)
    base = results["before (no filter)"]["p50_ms"]
    print(f"claim of 50 over {2 * args.jobs:,} pending jobs, {args.rounds} claims each:")
    for label, figures in results.items():
        print(f"  {label:<40} p50 {figures['p50_ms']:8.3f} ms  p99 {figures['p99_ms']:8.3f} ms"
              f"  x{figures['p50_ms'] / base:.2f}")


if __name__ == "__main__":
    main()
