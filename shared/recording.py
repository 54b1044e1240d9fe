"""Recording an event: the event row and, for a new event, its job row, in one
transaction. The ingest records deliveries through it; anything else that learns of an
event (a reconciliation with the provider's API) must record it through it too, so that
one event makes one row and one job however many ways and times it arrives.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from webhooks.shared import db, providers, queries
from webhooks.shared.errors import DatabaseUnavailable, InvalidPayload
from webhooks.shared.models import JobStatus, ReceivedVia


@dataclass(frozen=True)
class RecordingResult:
    job_id: int | None  # None: a duplicate of an event whose job was pruned
    duplicate: bool
    status: str
    # The event a duplicate repeats: the same id, or for a provider whose ids are not
    # signed (GitHub, Shopify) possibly another id with the same body and type.
    event_id: str | None = None


@dataclass(frozen=True)
class Origin:
    """Where an event came from, recorded on its row: the source that carried it (None:
    the provider's default source), and Stripe's `account` and `livemode` (None elsewhere).
    The job is the event's: it takes the event row's source."""

    source: str | None = None
    account: str | None = None
    livemode: bool | None = None


DEFAULT_ORIGIN = Origin()


def record_event(engine: Engine, provider: str, event_id: str, event_type: str,
                 payload: bytes, via: ReceivedVia = ReceivedVia.DELIVERY,
                 trace_context: str | None = None,
                 origin: Origin = DEFAULT_ORIGIN) -> RecordingResult:
    """Commit the event and its job, or count a duplicate and find the job of the event
    seen before. `engine` is an autocommit engine (db.create_engine(autocommit=True));
    `payload` is the event's JSON, as received; `trace_context` a traceparent stored with
    the job (shared/tracing.py); `origin` its source, account and livemode.

    The dedup key is the provider's (provider, event_id) whichever source carries the
    event, and (provider, source, event_id) for `standard` (webhook_dedup_key, in SQL: the
    records' DedupScope): a second source's delivery of one Stripe event is a duplicate,
    counted with its source.

    Returns only after COMMIT, so an acknowledgement always stands on committed rows. A
    connection that died in the pool (database restarted) is retried once on a fresh one.
    """
    for attempt in (1, 2):
        try:
            return _record(engine, provider, event_id, event_type, payload, via,
                           trace_context, origin)
        except DatabaseUnavailable as error:
            cause = error.__cause__
            stale = isinstance(cause, sa.exc.DBAPIError) and cause.connection_invalidated
            if attempt == 2 or not stale:
                raise
    raise AssertionError("unreachable")


def _record(engine: Engine, provider: str, event_id: str, event_type: str,
            payload: bytes, via: ReceivedVia, trace_context: str | None,
            origin: Origin) -> RecordingResult:
    # A provider whose signature leaves the id and type out (GitHub, Shopify): one captured
    # delivery re-sent under new ids would mint new events, so its body is unique too, per
    # event type (Shopify sends one order's body as orders/create and as orders/paid).
    body_sha256 = None if providers.signs_event_id(provider) else hashlib.sha256(payload).digest()
    # The dedup key (webhook_dedup_key, in SQL: the source is part of it for `standard` only)
    key = {"provider": provider, "source": origin.source or provider, "event_id": event_id,
           "event_type": event_type, "body_sha256": body_sha256}
    try:
        # One statement on an autocommit engine is one transaction, committed before
        # fetch_one returns.
        job = db.fetch_one(engine, queries.EventJobInsert, {
            **key, "payload": payload.decode("utf-8"),
            "received_via": str(via), "trace_context": trace_context,
            "account": origin.account, "livemode": origin.livemode})
        if job is not None:
            return RecordingResult(job_id=job[0], duplicate=False, status=job[1])
        existing = db.fetch_one(engine, queries.DuplicateCount, key)
    except (sa.exc.DataError, UnicodeDecodeError):
        # JSON that Python accepts but jsonb refuses (\u0000, lone surrogates, NaN).
        raise InvalidPayload("body is not JSON that Postgres can store") from None
    if existing is None or existing[0] is None:  # pruned meanwhile, or its job was
        return RecordingResult(job_id=None, duplicate=True, status=JobStatus.DONE,
                               event_id=existing[2] if existing else event_id)
    return RecordingResult(job_id=existing[0], duplicate=True, status=existing[1],
                           event_id=existing[2])
