"""`webhooks replay`: move failed jobs back to pending and wake the workers.

Only `failed` jobs move. Naming a `done` job refuses the whole replay (nothing changes):
its effects are applied, and running it again is exactly what this project prevents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from shared import queries
from shared.errors import WebhooksError


class ReplayRefused(WebhooksError):
    pass


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
    if spec.job_ids:
        rows = conn.execute(
            sa.text("SELECT id, status FROM jobs WHERE id = ANY(:ids) ORDER BY id FOR UPDATE"),
            {"ids": list(spec.job_ids)},
        ).all()
        found = {row.id: row.status for row in rows}
        missing = sorted(set(spec.job_ids) - set(found))
        if missing:
            raise ReplayRefused(f"no such job: {', '.join(map(str, missing))}")
        done = sorted(job for job, status in found.items() if status == "done")
        if done:
            raise ReplayRefused(
                f"refusing to replay done job(s) {', '.join(map(str, done))}: "
                "their effects are already applied"
            )
        return ReplayPlan(
            job_ids=sorted(j for j, s in found.items() if s == "failed"),
            skipped_pending=sorted(j for j, s in found.items() if s == "pending"),
        )
    where, params = ["status = 'failed'"], {}
    filters: dict[str, Any] = {"provider": spec.provider, "event_type": spec.event_type}
    for column, value in filters.items():
        if value is not None:
            where.append(f"{column} = :{column}")
            params[column] = value
    if spec.since is not None:
        where.append("created_at >= :since")
        params["since"] = spec.since
    ids = conn.execute(
        sa.text(f"SELECT id FROM jobs WHERE {' AND '.join(where)} ORDER BY id FOR UPDATE"),
        params,
    ).scalars().all()
    return ReplayPlan(job_ids=list(ids))


def apply(conn: Connection, job_ids: list[int]) -> list[int]:
    """Failed -> pending, attempts reset. Guarded by status, so it never touches done."""
    return list(conn.execute(queries.JobReplay, {"ids": job_ids}).scalars().all())


def replay(engine: Engine, spec: ReplayFilter, *, dry_run: bool) -> ReplayPlan:
    with engine.begin() as conn:
        chosen = plan(conn, spec)
        if not dry_run and chosen.job_ids:
            chosen.job_ids = apply(conn, chosen.job_ids)
        return chosen
