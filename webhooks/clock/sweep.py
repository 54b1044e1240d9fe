"""The sweeper: wake workers for due pending jobs and due outbox rows whose wake-up may
have been lost (broker down at ingest, a worker killed, a message dropped). Wake-ups are
idempotent: at worst a worker finds nothing to claim.

Each sweep also records the database server's timeline (shared/failover.py): a timeline
not seen before, after the first, is a failover, logged at WARNING; the clock's
after-failover reconciliation and the outbox's searches follow from the recorded row.
And it merges the event search index's pending list (queries.EventSearchFlush), so that
the workers' batches, which append documents to it, never merge it themselves."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import dramatiq
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from shared import db, failover, queries, wakeups

log = logging.getLogger(__name__)

MAX_WAKEUPS_PER_SWEEP = 500


@dataclass(frozen=True)
class SweepResult:
    due_jobs: int
    due_emails: int
    woken: bool
    timeline: failover.Timeline | None = None  # a timeline seen for the first time


def sweep(engine: Engine, broker: dramatiq.Broker) -> SweepResult | None:
    """Wake workers for due work. None if another clock is sweeping right now."""
    with engine.begin() as conn:
        if not conn.execute(queries.ClockTryLock, {"name": "webhooks:sweep"}).scalar_one():
            return None
        due_jobs = conn.execute(queries.JobCountDue).scalar_one()
        due_emails = conn.execute(queries.OutboxCountDue).scalar_one()
        timeline = failover.record_timeline(conn)
    if timeline is not None:
        _report(timeline)
    flush_search(engine)
    woken = True
    if due_jobs:
        uncovered = _uncovered(broker, wakeups.JOBS_QUEUE, due_jobs, wakeups.JOBS_PER_MESSAGE)
        woken &= wakeups.wake_due_jobs(broker, uncovered)
    if due_emails:
        per = wakeups.EMAILS_PER_MESSAGE
        uncovered = _uncovered(broker, wakeups.OUTBOX_QUEUE, due_emails, per)
        woken &= wakeups.wake_outbox(broker, wakeups.messages_for(uncovered, per))
    if due_jobs or due_emails:
        log.info("sweep woke workers",
                 extra={"due_jobs": due_jobs, "due_emails": due_emails, "enqueued": woken})
    return SweepResult(due_jobs, due_emails, woken, timeline)


def flush_search(engine: Engine) -> int | None:
    """Merge the search index's pending list, in a transaction of its own; None if it
    failed (logged: not the index's owner, or the index missing), and the sweep goes on."""
    try:
        with engine.begin() as conn:
            return int(conn.execute(queries.EventSearchFlush).scalar_one())
    except sa.exc.DBAPIError as error:
        if db.is_unavailable(error):
            raise
        log.warning("search index's pending list not merged",
                    extra={"error": str(error.orig).splitlines()[0] if error.orig else ""})
        return None


def _report(timeline: failover.Timeline) -> None:
    fields = {"timeline": timeline.timeline_id,
              "first_seen_at": timeline.first_seen_at.isoformat()}
    if timeline.failover:
        log.warning("database failover: a new timeline; reconciling after it", extra=fields)
    else:
        log.info("database timeline recorded", extra=fields)


def _uncovered(broker: dramatiq.Broker, queue: str, due: int, per: int) -> int:
    """The due rows that no wake-up waiting in the queue covers (each covers `per`), at
    most MAX_WAKEUPS_PER_SWEEP wake-ups' worth: a long broker-side backlog (workers down
    for hours) does not grow every sweep."""
    waiting = wakeups.queued(broker, queue) or 0
    return max(min(due - waiting * per, MAX_WAKEUPS_PER_SWEEP * per), 0)
