"""The sweeper: wake workers for due pending jobs and due outbox rows whose wake-up may
have been lost (broker down at ingest, a worker killed, a message dropped). Wake-ups are
idempotent: at worst a worker finds nothing to claim. Before it counts, a sweep holds the
jobs of paused sources that a pause missed and releases the held jobs of sources no longer
paused (shared/pausing.py: a recording that raced a pause or a resume).

Each sweep also records the database server's timeline (shared/failover.py): a timeline
not seen before, after the first, is a failover, logged at WARNING; the clock's
after-failover reconciliation and the outbox's searches follow from the recorded row; with
settings, a failover's `database.failover` notification is recorded in the same
transaction. And it merges the event search index's pending list
(queries.EventSearchFlush), so that the workers' batches, which append documents to it,
never merge it themselves.

Due notification deliveries are woken too (coalesced tails fall due when their window
closes, whoever recorded them).

And each sweep stamps the clock's heartbeat (clock_heartbeats) with the intervals it runs
with: web's /metrics shows how long ago the clock last swept, and whether periodic
reconciliation is on, so that a stopped clock, which otherwise makes no sound, fires
WebhookClockStopped (deploy/prometheus/alerts.yml)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import dramatiq
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from webhooks.shared import calls, db, failover, notifications, pausing, queries, wakeups
from webhooks.shared.models import SWEEP_HEARTBEAT
from webhooks.shared.settings import Settings

log = logging.getLogger(__name__)

MAX_WAKEUPS_PER_SWEEP = 500
NOTIFICATIONS_PER_WAKEUP = 20  # worker/notify.py claims this many deliveries a round


@dataclass(frozen=True)
class Beat:
    """What the heartbeat says besides its time: the sweep's period, the periodic
    reconciliation's (0: off, or no source has API credentials) and the sources it
    reconciles, each `provider/source`."""

    interval_seconds: float
    reconcile_interval_seconds: float
    reconcile_sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepResult:
    due_jobs: int
    due_emails: int
    woken: bool
    timeline: failover.Timeline | None = None  # a timeline seen for the first time
    due_notifications: int = 0


def sweep(engine: Engine, broker: dramatiq.Broker,
          settings: Settings | None = None, beat: Beat | None = None) -> SweepResult | None:
    """Wake workers for due work, and stamp the heartbeat with `beat` (None: no stamp).
    None if another clock is sweeping right now."""
    with engine.begin() as conn:
        if not conn.execute(queries.ClockTryLock, {"name": "webhooks:sweep"}).scalar_one():
            return None
        held, released = pausing.heal(conn)
        due_jobs = conn.execute(queries.JobCountDue).scalar_one()
        due_emails = conn.execute(queries.OutboxCountDue).scalar_one()
        due_notifications = conn.execute(queries.NotificationCountDue).scalar_one()
        due_calls = conn.execute(calls.CallCountDue).scalar_one()
        timeline = failover.record_timeline(conn)
        if beat is not None:
            conn.execute(queries.ClockHeartbeatStamp, {
                "name": SWEEP_HEARTBEAT, "interval_seconds": beat.interval_seconds,
                "reconcile_interval_seconds": beat.reconcile_interval_seconds,
                "reconcile_sources": list(beat.reconcile_sources)})
        if timeline is not None and timeline.failover and settings is not None:
            due_notifications += notifications.record(conn, settings, [
                notifications.Occurrence(notifications.Kind.DATABASE_FAILOVER, extra={
                    "timeline": timeline.timeline_id})]).due_now
    if timeline is not None:
        _report(timeline)
    if held or released:
        log.info("sweep held the jobs of paused sources and released the others'",
                 extra={"held": held, "released": released})
    flush_search(engine)
    woken = True
    if due_jobs:
        uncovered = _uncovered(broker, wakeups.JOBS_QUEUE, due_jobs, wakeups.JOBS_PER_MESSAGE)
        woken &= wakeups.wake_due_jobs(broker, uncovered)
    if due_emails:
        per = wakeups.EMAILS_PER_MESSAGE
        uncovered = _uncovered(broker, wakeups.OUTBOX_QUEUE, due_emails, per)
        woken &= wakeups.wake_outbox(broker, wakeups.messages_for(uncovered, per))
    if due_notifications:
        uncovered = _uncovered(broker, wakeups.NOTIFY_QUEUE, due_notifications,
                               NOTIFICATIONS_PER_WAKEUP)
        woken &= wakeups.wake_notifications(
            broker, wakeups.messages_for(uncovered, NOTIFICATIONS_PER_WAKEUP))
    if due_calls:
        per = wakeups.CALLS_PER_MESSAGE
        uncovered = _uncovered(broker, wakeups.CALLS_QUEUE, due_calls, per)
        woken &= wakeups.wake_calls(broker, wakeups.messages_for(uncovered, per))
    if due_jobs or due_emails or due_notifications or due_calls:
        log.info("sweep woke workers",
                 extra={"due_jobs": due_jobs, "due_emails": due_emails,
                        "due_notifications": due_notifications, "due_calls": due_calls,
                        "enqueued": woken})
    return SweepResult(due_jobs, due_emails, woken, timeline, due_notifications)


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
