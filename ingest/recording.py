"""The ingest's one transaction: the event row and, for a new event, its job row."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from shared import db, queries
from shared.errors import DatabaseUnavailable, InvalidPayload
from shared.providers.base import Delivery


@dataclass(frozen=True)
class Recorded:
    job_id: int | None
    duplicate: bool
    status: str


def record_delivery(engine: Engine, provider: str, delivery: Delivery, body: bytes) -> Recorded:
    """Commit the event and its job, or find the job of an event seen before.

    Returns only after COMMIT, so a 200 always stands on committed rows. A connection
    that died in the pool (database restarted) is retried once on a fresh one.
    """
    for attempt in (1, 2):
        try:
            return _record(engine, provider, delivery, body)
        except DatabaseUnavailable as error:
            cause = error.__cause__
            stale = isinstance(cause, sa.exc.DBAPIError) and cause.connection_invalidated
            if attempt == 2 or not stale:
                raise
    raise AssertionError("unreachable")


def _record(engine: Engine, provider: str, delivery: Delivery, body: bytes) -> Recorded:
    key = {"provider": provider, "event_id": delivery.event_id}
    try:
        # One statement in autocommit is one transaction, committed before execute returns.
        with db.autocommit(engine) as conn:
            job = conn.execute(
                queries.EventJobInsert,
                {**key, "event_type": delivery.event_type, "payload": body.decode("utf-8")},
            ).first()
        if job is not None:
            return Recorded(job_id=job.id, duplicate=False, status=job.status)
        with db.transaction(engine) as conn:
            conn.execute(queries.DuplicateInsert, key)
            existing = conn.execute(queries.JobStatusByEvent, key).first()
    except (sa.exc.DataError, UnicodeDecodeError):
        # JSON that Python accepts but jsonb refuses (\u0000, lone surrogates, NaN).
        raise InvalidPayload("body is not JSON that Postgres can store") from None
    if existing is None:
        return Recorded(job_id=None, duplicate=True, status="done")
    return Recorded(job_id=existing.id, duplicate=True, status=existing.status)
