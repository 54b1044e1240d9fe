"""Replay: move failed jobs back to pending (`webhooks replay`, and the console's Replay
buttons), and retry a failed email (the console's Retry); the caller then wakes the
workers.

Only `failed` jobs move. Naming a `done` job refuses the whole replay (nothing changes):
its effects are applied, and running it again is exactly what this project prevents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.engine import Connection, Engine

from webhooks.shared import queries
from webhooks.shared.errors import WebhooksError
from webhooks.shared.models import JobStatus


class ReplayRefused(WebhooksError):
    """A named job is done or unknown: nothing was replayed."""


@dataclass(frozen=True)
class ReplayFilter:
    job_ids: tuple[int, ...] = ()
    all_failed: bool = False
    provider: str | None = None
    event_type: str | None = None
    since: datetime | None = None


@dataclass
class ReplayPlan:
    job_ids: list[int] = field(default_factory=list)
    skipped_pending: list[int] = field(default_factory=list)


def plan(conn: Connection, spec: ReplayFilter) -> ReplayPlan:
    """The failed jobs to replay, locked FOR UPDATE; refuses done or unknown named jobs."""
    if not spec.job_ids:
        ids = conn.execute(queries.JobListFailedMatching, {
            "provider": spec.provider, "event_type": spec.event_type, "since": spec.since,
        }).scalars().all()
        return ReplayPlan(job_ids=list(ids))
    rows = conn.execute(queries.JobLockStatuses, {"ids": list(spec.job_ids)}).all()
    found = {row.id: JobStatus(row.status) for row in rows}
    missing = sorted(set(spec.job_ids) - set(found))
    if missing:
        raise ReplayRefused(f"no such job: {', '.join(map(str, missing))}")
    done = [job for job, status in found.items() if status is JobStatus.DONE]
    if done:
        raise ReplayRefused(f"refusing to replay done job(s) {', '.join(map(str, done))}: "
                            "their effects are already applied")
    return ReplayPlan(
        job_ids=[job for job, status in found.items() if status is JobStatus.FAILED],
        skipped_pending=[job for job, status in found.items() if status is JobStatus.PENDING],
    )


def retry_email(engine: Engine, email_id: int) -> bool:
    """A failed email back to pending, same idempotency key (the dispatcher searches
    Postmark before sending it again). False if it was not failed."""
    with engine.begin() as conn:
        return conn.execute(queries.OutboxRetryFailed, {"id": email_id}).first() is not None


def replay(engine: Engine, spec: ReplayFilter, *, dry_run: bool) -> ReplayPlan:
    """Plan and, unless dry_run, move the planned jobs failed -> pending (guarded by
    status, so it never touches a done job), in one transaction."""
    with engine.begin() as conn:
        chosen = plan(conn, spec)
        if not dry_run and chosen.job_ids:
            moved = conn.execute(queries.JobReplay, {"ids": chosen.job_ids}).scalars().all()
            chosen.job_ids = sorted(moved)
        return chosen
