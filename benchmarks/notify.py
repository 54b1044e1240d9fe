"""`python -m benchmarks.notify`: what notifications cost the worker's hot path.

On a throwaway database, the worker's own batch function (worker.jobs.process_batch, in
this process) applies N jobs of one kind per round: jobs that fail for good at their first
attempt (a handler raising PermanentJobError: one `job.failed` each, coalesced, and a
failed attempt counted per source), or jobs that succeed (a handler with no effect: the
batch's one look-up of failing sources). Each workload runs three ways, alternated over
the rounds:

- `no notifications`: shared.notifications.flush replaced by a no-op (the code before them);
- `no channel`: recorded only;
- `three channels`: Slack, email and webhook set, so each notification also gets three
  delivery rows (the dispatch itself runs in another actor, not measured here).

Prints the worker's CPU (this process's, time.process_time) and wall time per job, the
median over the rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import sqlalchemy as sa

from benchmarks import stack
from webhooks import JobContext, handler
from webhooks.shared import handlers, notifications
from webhooks.shared.errors import PermanentJobError
from webhooks.shared.settings import Settings
from webhooks.worker import jobs

BATCH = 50


@handler("github", "bench.fail")
def _fail(ctx: JobContext) -> str:
    raise PermanentJobError(f"bench: {ctx.event_id} always fails")


@handler("github", "bench.ok")
def _ok(ctx: JobContext) -> str:
    return "ok"


def seed(engine: sa.Engine, event_type: str, count: int, round_no: int) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("""
            WITH e AS (
                INSERT INTO webhook_events (provider, source, event_id, event_type, payload)
                SELECT 'github', 'github', :prefix || n, :type, '{}'::jsonb
                FROM generate_series(1, :n) AS n
                RETURNING provider, source, event_id, event_type, received_at)
            INSERT INTO jobs (provider, source, event_id, event_type, created_at)
            SELECT provider, source, event_id, event_type, received_at FROM e"""),
            {"prefix": f"{event_type}-{round_no}-", "type": event_type, "n": count})


def drain(engine: sa.Engine, settings: Settings) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    while jobs.process_batch(engine, settings, limit=BATCH).claimed:
        pass
    return time.process_time() - cpu, time.perf_counter() - wall


def run(engine: sa.Engine, settings: Settings, event_type: str, count: int, round_no: int,
        enabled: bool) -> tuple[float, float]:
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE notification_deliveries, notifications, "
                             "notification_windows, notification_health, jobs, "
                             "webhook_events, webhook_dedup CASCADE"))
    seed(engine, event_type, count, round_no)
    jobs.PACE.seconds_per_job = 1e-9  # full claims every run, whatever the last one learned
    flush = notifications.flush
    if not enabled:
        jobs.notifications.flush = lambda *_: notifications.Queued()  # type: ignore[attr-defined]
    try:
        return drain(engine, settings)
    finally:
        jobs.notifications.flush = flush  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    name = "webhooks_bench_notify"
    target = stack.prepare(args.admin_url, name, "redis://127.0.0.1:6379/3",
                           stack.ROOT / ".bench-logs")
    engine = target.engine()
    # This module is the app whose handlers the jobs run (only the named apps' handlers run).
    base = Settings.from_env({"DATABASE_URL": target.database_url, "JOB_MAX_ATTEMPTS": "1",
                              "WEBHOOK_HANDLERS": "benchmarks.notify"})
    channels = dataclasses.replace(
        base, notify_slack_webhook_url="http://127.0.0.1:9/slack",
        notify_email_to="oncall@example.com", notify_webhook_url="http://127.0.0.1:9/hook",
        notify_webhook_secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    handlers.load(base)
    ways: dict[str, tuple[Settings, bool]] = {
        "no notifications": (base, False), "no channel": (base, True),
        "three channels": (channels, True)}
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for round_no in range(args.rounds):
            for workload in ("bench.fail", "bench.ok"):
                for label, (settings, enabled) in ways.items():
                    results.setdefault((workload, label), []).append(
                        run(engine, settings, workload, args.jobs, round_no, enabled))
    finally:
        engine.dispose()
        stack.drop(args.admin_url, name)
    report(results, args.jobs, args.rounds)


def report(results: dict[tuple[str, str], list[tuple[float, float]]], count: int,
           rounds: int) -> None:
    print(f"worker.jobs.process_batch, {count:,} jobs per round, median of {rounds} rounds:")
    for (workload, label), runs in results.items():
        cpu = statistics.median(r[0] for r in runs) / count * 1e6
        wall = statistics.median(r[1] for r in runs) / count * 1e6
        kind = "failed" if workload == "bench.fail" else "done"
        print(f"  {kind:<6} {label:<17} CPU {cpu:7.1f} us/job  wall {wall:7.1f} us/job")


if __name__ == "__main__":
    main()
