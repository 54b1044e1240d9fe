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
    """Commit the event and its job, or count a duplicate and find the job of the event
    seen before. `engine` is an autocommit engine (db.create_engine(autocommit=True)).

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
        # One statement on an autocommit engine is one transaction, committed before
        # fetch_one returns.
        job = db.fetch_one(engine, queries.EventJobInsert, {
            **key, "event_type": delivery.event_type, "payload": body.decode("utf-8")})
        if job is not None:
            return Recorded(job_id=job[0], duplicate=False, status=job[1])
        existing = db.fetch_one(engine, queries.DuplicateCounted, key)
    except (sa.exc.DataError, UnicodeDecodeError):
        # JSON that Python accepts but jsonb refuses (\u0000, lone surrogates, NaN).
        raise InvalidPayload("body is not JSON that Postgres can store") from None
    if existing is None:
        return Recorded(job_id=None, duplicate=True, status="done")
    return Recorded(job_id=existing[0], duplicate=True, status=existing[1])
