"""`python -m benchmarks.overview`: the console's overview page on a large database.

On a throwaway database: N events and their jobs (four sources: stripe, stripe/connect,
github, paddle; received over the last 30 days, the retention window; 1 in 2,000 jobs
pending, 1 in 10,000 failed, the rest done) and N/20 duplicates, each table loaded by one
`INSERT ... SELECT generate_series`, then VACUUM ANALYZE, as autovacuum leaves a table
that size (no search documents: the overview does not read them, and the jobs inserted
here run no worker). Then times `GET /` through
Flask's test client (the console blueprint, the page's queries and its rendering), p50 and
p99 over the rounds: counted from the statistics past overview.EXACT_BELOW_ROWS rows (as
the console does), and with the exact grouped counts it ran before (a few rounds: each
reads every row). Prints both and the ratio; the target is p99 under 200 ms at ten million
jobs (`--rows`; at two million, the default on the shared 2-core machine, the exact counts'
time grows with the rows and the estimates' does not).
"""

from __future__ import annotations

import argparse
import base64
import math
import statistics
import time
from typing import Any

import sqlalchemy as sa
from flask import Flask

from benchmarks import stack
from webhooks.console import ConsoleSettings, create_blueprint
from webhooks.shared import overview

PASSWORD = "benchmark-console-password"

# n % 20 → source: 12 of 20 the platform's Stripe account, 4 Connect, 3 GitHub, 1 Paddle.
SOURCE_OF = """CASE WHEN n % 20 < 12 THEN 'stripe' WHEN n % 20 < 16 THEN 'stripe'
                    WHEN n % 20 < 19 THEN 'github' ELSE 'paddle' END"""
NAME_OF = """CASE WHEN n % 20 < 12 THEN 'stripe' WHEN n % 20 < 16 THEN 'connect'
                  WHEN n % 20 < 19 THEN 'github' ELSE 'paddle' END"""


def load(engine: sa.Engine, rows: int) -> dict[str, float]:
    """Load the tables; seconds per step."""
    took: dict[str, float] = {}
    steps = {
        "events": f"""
            INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                        received_at)
            SELECT {SOURCE_OF}, {NAME_OF}, 'evt_' || n, 'invoice.paid',
                   jsonb_build_object('id', 'evt_' || n, 'type', 'invoice.paid'),
                   now() - make_interval(secs => (n % 2592000)::float8)
            FROM generate_series(1, {rows}) AS n""",
        "jobs": """
            INSERT INTO jobs (provider, source, event_id, event_type, status, attempts,
                              run_at, created_at, finished_at)
            SELECT provider, source, event_id, event_type,
                   CASE WHEN id % 2000 = 0 THEN 'pending' WHEN id % 10000 = 1 THEN 'failed'
                        ELSE 'done' END,
                   CASE WHEN id % 2000 = 0 THEN 0 ELSE 1 END, received_at, received_at,
                   CASE WHEN id % 2000 = 0 THEN NULL ELSE received_at END
            FROM webhook_events""",
        "duplicates": """
            INSERT INTO webhook_duplicates (provider, source, event_id, event_source,
                                            received_at)
            SELECT provider, source, event_id, source, received_at
            FROM webhook_events WHERE id % 20 = 0""",
    }
    for label, statement in steps.items():
        started = time.perf_counter()
        with engine.begin() as conn:
            conn.execute(sa.text(statement))
        took[label] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE webhook_events, jobs, webhook_duplicates"))
    took["vacuum analyze"] = round(time.perf_counter() - started, 1)
    return took


def time_page(engine: sa.Engine, rounds: int) -> list[float]:
    app = Flask(__name__)
    app.register_blueprint(create_blueprint(engine, ConsoleSettings(password=PASSWORD)))
    credentials = base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
    headers = {"Authorization": f"Basic {credentials}"}
    timings = []
    with app.test_client() as client:
        for _ in range(rounds):
            started = time.perf_counter()
            answer = client.get("/", headers=headers)
            timings.append((time.perf_counter() - started) * 1000)
            assert answer.status_code == 200, answer.status_code
    return timings


def summary(timings: list[float]) -> dict[str, float]:
    ordered = sorted(timings)
    return {"p50_ms": round(statistics.median(ordered), 1),
            "p99_ms": round(ordered[max(math.ceil(len(ordered) * 0.99) - 1, 0)], 1),
            "rounds": len(ordered)}


def measure(engine: sa.Engine, rounds: int, exact_rounds: int) -> dict[str, Any]:
    time_page(engine, 2)  # warm: the connection pool, the templates, the buffers
    estimated = summary(time_page(engine, rounds))
    threshold = overview.EXACT_BELOW_ROWS
    overview.EXACT_BELOW_ROWS = 1 << 62  # every table counted exactly, as before
    try:
        exact = summary(time_page(engine, exact_rounds))
    finally:
        overview.EXACT_BELOW_ROWS = threshold
    return {"estimated": estimated, "exact": exact}


ROWS = 2_000_000
SMOKE = {"rows": 20_000, "rounds": 10, "exact_rounds": 2}
TARGET_P99_MS = 200


def run(target: stack.Target, rows: int = ROWS, rounds: int = 100,
        exact_rounds: int = 5) -> dict[str, Any]:
    """`python -m benchmarks --only overview` (and, small, --smoke): load and measure on
    the benchmark's own database, emptied before and after."""
    stack.reset(target)
    engine = target.engine()
    try:
        took = load(engine, rows)
        results = measure(engine, rounds, exact_rounds)
    finally:
        engine.dispose()
        stack.reset(target)
    print(f"console overview over {rows:,} events and jobs: estimated p99 "
          f"{results['estimated']['p99_ms']} ms, exact p99 {results['exact']['p99_ms']} ms",
          flush=True)
    return {"rows": rows, "load_seconds": took, **results, "target_p99_ms": TARGET_P99_MS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rows", type=int, default=2_000_000, help="events (and jobs)")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--exact-rounds", type=int, default=5)
    parser.add_argument("--database", default="webhooks_bench_overview",
                        help="the throwaway database (dropped and created again)")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/9",
                        help="emptied at start")
    args = parser.parse_args()
    target = stack.prepare(args.admin_url, args.database, args.broker_url,
                           stack.ROOT / ".bench-logs")
    try:
        results = run(target, args.rows, args.rounds, args.exact_rounds)
    finally:
        stack.drop(args.admin_url, args.database)
    took = results["load_seconds"]
    print(f"console overview (GET /) over {args.rows:,} events and jobs; load {took} s:")
    for label in ("estimated", "exact"):
        figures = results[label]
        print(f"  {label:<10} p50 {figures['p50_ms']:9.1f} ms  p99 {figures['p99_ms']:9.1f} ms"
              f"  ({figures['rounds']} rounds)")
    ratio = results["exact"]["p50_ms"] / results["estimated"]["p50_ms"]
    print(f"  exact / estimated p50: x{ratio:.1f}")


if __name__ == "__main__":
    main()
