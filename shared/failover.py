"""After a failover: the database server's timeline, and the window that follows a change.

A promoted standby writes on a new timeline. With an asynchronous standby, what the old
primary committed last (events acknowledged with a 200, "sent" marks of emails) may be
gone. Two things bring it back, for RECONCILE_AFTER_FAILOVER_HOURS after the failover
(the provider's whole retry window):

- the clock reconciles every source with credentials, each with its own, over that window
  (webhooks/clock/schedule.py reconcile_after_failover): the lost events are recorded again, as
  `reconcile`, and applied once;
- the outbox dispatcher searches Postmark before the first send of every email too
  (worker/outbox.py): a row re-created by a re-applied job starts at its first attempt,
  and Postmark may already have its message.

The clock records each timeline the first time it sees it (record_timeline, under its
sweep's lock). The first one recorded is the start, not a failover. The dispatcher does
not wait for that: it searches from the promotion on (search_first_sends), as soon as
its own connection writes on a timeline with no row yet, and until the window after the
latest recorded failover ends; it records nothing itself. Everything else is derived
from the recorded rows, so a restarted clock, or another one, carries on: the window
starts at the latest failover's first sight, and a source's after-failover run is
marked done only when it succeeded (failover_reconciles, one row per source: a Connect
source that fails is run again without running the platform's own source again).

The first timeline must have reached the standby before the failover for the next to be
seen as one: the clock records it at its first sweep, long before any failover in
practice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.engine import Connection, Engine

from webhooks.shared import db, queries


@dataclass(frozen=True)
class Timeline:
    """A timeline seen for the first time: failover False for the first one recorded."""

    timeline_id: int
    failover: bool
    first_seen_at: datetime


@dataclass(frozen=True)
class Failover:
    """The latest failover: its timeline, when it was first seen and how long ago (by the
    database's clock, the one every process shares)."""

    timeline_id: int
    first_seen_at: datetime
    age_seconds: float


@dataclass(frozen=True)
class Due:
    """The after-failover reconciliation still to do: sources over [since, now], each as
    (provider, source name)."""

    timeline_id: int
    since: datetime
    sources: list[tuple[str, str]]


def record_timeline(conn: Connection) -> Timeline | None:
    """Record the server's timeline in conn's transaction; the Timeline if it was new."""
    row = conn.execute(queries.TimelineRecord).first()
    if row is None:
        return None
    return Timeline(int(row.timeline_id), bool(row.failover), row.first_seen_at)


def latest(conn: Connection) -> Failover | None:
    row = conn.execute(queries.TimelineLatestFailover).first()
    if row is None:
        return None
    return Failover(int(row.timeline_id), row.first_seen_at, float(row.age))


def in_window(age_seconds: float | None, hours: float) -> bool:
    """Whether a failover age_seconds ago (None: none recorded) is within the window."""
    return age_seconds is not None and age_seconds < hours * 3600


def search_first_sends(conn: Connection, hours: float) -> bool:
    """Whether the outbox must search Postmark before first sends, read in conn's
    transaction (one statement): the server conn writes on has a timeline no clock has
    recorded yet (a promotion the next sweep will record, or nothing recorded: it cannot
    tell), or the latest recorded failover is within the window of `hours`."""
    row = conn.execute(queries.TimelineOutboxSearch).one()
    return bool(row.unrecorded) or in_window(
        None if row.failover_age is None else float(row.failover_age), hours)


def reconciles_due(engine: Engine, sources: Iterable[tuple[str, str]],
                   hours: float) -> Due | None:
    """The sources, (provider, name), not yet reconciled after the latest failover, while
    it is within the window; None when there is nothing to do."""
    with db.transaction(engine) as conn:
        failover = latest(conn)
        if failover is None or not in_window(failover.age_seconds, hours):
            return None
        done = {(row.provider, row.source) for row in conn.execute(
            queries.FailoverReconcileListDone, {"timeline_id": failover.timeline_id})}
    left = [source for source in sources if source not in done]
    if not left:
        return None
    return Due(failover.timeline_id, failover.first_seen_at - timedelta(hours=hours), left)


def mark_reconciled(engine: Engine, timeline_id: int, provider: str,
                    source: str | None = None) -> None:
    """Source `source` of provider (None: its default one) reconciled after the failover."""
    with db.transaction(engine) as conn:
        conn.execute(queries.FailoverReconcileMarkDone, {
            "timeline_id": timeline_id, "provider": provider, "source": source or provider})
