"""The Procfile's `clock`: periodic tasks on APScheduler.

- sweep, every SWEEP_INTERVAL_SECONDS: wake workers for due pending jobs and due outbox
  rows whose broker message may have been lost (broker down at ingest, a worker killed, a
  message dropped). Wake-ups are idempotent: at worst a worker finds nothing to claim.
- prune, nightly: retention (worker/retention.py).

Several clocks running by mistake do no harm: each tick takes a Postgres advisory lock
and skips if another clock holds it, and the work it triggers is idempotent anyway.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import dramatiq
import sqlalchemy as sa
from apscheduler.schedulers.blocking import BlockingScheduler
from sqlalchemy.engine import Engine

from shared import db, queries
from shared.settings import Settings
from worker import broker as wakeups
from worker import retention

log = logging.getLogger(__name__)

JOB_WAKEUP_BATCH = wakeups.JOBS_PER_MESSAGE  # jobs one wake-up claims
OUTBOX_WAKEUP_BATCH = 50
MAX_WAKEUPS_PER_SWEEP = 500

TryLock = sa.text("SELECT pg_try_advisory_xact_lock(hashtext(:name))")


@dataclass(frozen=True)
class SweepResult:
    due_jobs: int
    due_emails: int
    woken: bool


def sweep(engine: Engine, broker: dramatiq.Broker) -> SweepResult | None:
    """Wake workers for due work. None if another clock is sweeping right now."""
    with engine.begin() as conn:
        if not conn.execute(TryLock, {"name": "webhooks:sweep"}).scalar_one():
            return None
        due_jobs = conn.execute(queries.JobCountDue).scalar_one()
        due_emails = conn.execute(queries.OutboxCountDue).scalar_one()
    woken = True
    if due_jobs:
        count = _missing(broker, wakeups.JOBS_QUEUE, due_jobs, JOB_WAKEUP_BATCH)
        woken &= wakeups.wake_jobs(broker, [0] * count)
    if due_emails:
        count = _missing(broker, wakeups.OUTBOX_QUEUE, due_emails, OUTBOX_WAKEUP_BATCH)
        woken &= wakeups.wake_outbox(broker, count)
    if due_jobs or due_emails:
        log.info("sweep woke workers",
                 extra={"due_jobs": due_jobs, "due_emails": due_emails, "enqueued": woken})
    return SweepResult(due_jobs, due_emails, woken)


def _missing(broker: dramatiq.Broker, queue: str, due: int, batch: int) -> int:
    """Wake-ups to add: enough for the due rows, less those already waiting in the queue,
    so a long broker-side backlog (workers down for hours) does not grow every sweep."""
    needed = math.ceil(due / batch)
    waiting = wakeups.queued(broker, queue) or 0
    return max(min(needed - waiting, MAX_WAKEUPS_PER_SWEEP), 0)


def prune(engine: Engine, days: int) -> int | None:
    with engine.begin() as conn:
        if not conn.execute(TryLock, {"name": "webhooks:prune"}).scalar_one():
            return None
    deleted = retention.prune(engine, days)
    log.info("pruned finished events", extra={"deleted": deleted, "days": days})
    return deleted


def run(settings: Settings) -> None:
    engine = db.create_engine(settings, pool_size=2)
    broker = wakeups.create_broker(settings)
    scheduler = BlockingScheduler(timezone="UTC")
    scheduler.add_job(_safely(sweep), "interval", args=(engine, broker),
                      seconds=settings.sweep_interval_seconds, id="sweep",
                      max_instances=1, coalesce=True, next_run_time=_now())
    scheduler.add_job(_safely(prune), "cron", args=(engine, settings.retention_days),
                      hour=3, minute=17, id="prune", max_instances=1, coalesce=True)
    log.info("clock started", extra={"sweep_interval": settings.sweep_interval_seconds})
    try:
        scheduler.start()
    except (KeyboardInterrupt, SystemExit):
        pass


def _safely(task):  # type: ignore[no-untyped-def]
    """A failing tick (database down) is logged; the next tick tries again."""

    def tick(*args):  # type: ignore[no-untyped-def]
        try:
            return task(*args)
        except Exception as error:
            log.warning("%s tick failed: %s", task.__name__, str(error).splitlines()[0])
            return None

    tick.__name__ = task.__name__
    return tick


def _now():  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    return datetime.now(UTC)
