"""The previous release's web (895c865: the core at migration 0022), as the benchmarks and
tests that run it beside a migration need it: its ingest statements, frozen, and its way
of recording a delivery with them."""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from webhooks.shared import db, providers, sources
from webhooks.shared.models import ALL_SOURCES, ReceivedVia
from webhooks.shared.recording import RecordingResult

PREVIOUS_RELEASE = "895c865"

# The previous release's ingest statements, copied verbatim from its shared/queries.py
# (`git show 895c865:shared/queries.py`): what its web runs while 0023 runs, and after the
# switch until its processes are replaced. They know neither webhook_dedup nor the
# partitions: what deduplicates them after the switch is the trigger
# webhook_events_dedup_guard. Frozen here, not derived from shared/queries.py, which has
# moved on.
PreviousEventJobInsert = sa.text(f"""
    WITH event AS (
        INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                    received_via, body_sha256, account, livemode)
        VALUES (:provider, :source, :event_id, :event_type, CAST(:payload AS jsonb),
                :received_via, :body_sha256, :account, :livemode)
        ON CONFLICT DO NOTHING
        RETURNING provider, source, event_id, event_type
    )
    INSERT INTO jobs (provider, source, event_id, event_type, trace_context, held)
    SELECT provider, source, event_id, event_type, CAST(:trace_context AS text),
           EXISTS (SELECT 1 FROM paused_providers p WHERE p.provider = event.provider
                   AND p.source IN ('{ALL_SOURCES}', event.source))
    FROM event
    RETURNING id, status
""")

PreviousDuplicateCount = sa.text("""
    WITH original AS (
        SELECT source, event_id FROM webhook_events
        WHERE provider = :provider AND event_id = :event_id
          AND (NOT :scoped OR source = :source)
        UNION ALL
        (SELECT source, event_id FROM webhook_events
         WHERE provider = :provider AND body_sha256 = :body_sha256
           AND event_type = :event_type
           AND NOT EXISTS (SELECT 1 FROM webhook_events
                           WHERE provider = :provider AND event_id = :event_id))
        LIMIT 1
    ), counted AS (
        INSERT INTO webhook_duplicates (provider, source, event_id, event_source)
        SELECT :provider, :source, event_id, source FROM original
    )
    SELECT j.id, j.status, o.event_id FROM original o
    LEFT JOIN jobs j ON j.provider = :provider AND j.source = o.source
                    AND j.event_id = o.event_id
""")


def previous_record(engine: Engine, provider: str, event_id: str, event_type: str,
                    payload: bytes, source: str | None = None) -> RecordingResult:
    """A delivery as the previous release's web records it (its shared/recording.py's
    _record, on an autocommit engine): the event and its job in one statement, else the
    duplicate counted and answered with its job's status."""
    body_sha256 = None if providers.signs_event_id(provider) else hashlib.sha256(payload).digest()
    key = {"provider": provider, "source": source or provider, "event_id": event_id,
           "event_type": event_type, "body_sha256": body_sha256,
           "scoped": sources.dedup_by_source(provider)}
    job = db.fetch_one(engine, PreviousEventJobInsert, {
        **key, "payload": payload.decode("utf-8"), "received_via": str(ReceivedVia.DELIVERY),
        "trace_context": None, "account": None, "livemode": None})
    if job is not None:
        return RecordingResult(job_id=job[0], duplicate=False, status=job[1])
    existing = db.fetch_one(engine, PreviousDuplicateCount, key)
    if existing is None or existing[0] is None:
        return RecordingResult(job_id=None, duplicate=True, status="done",
                               event_id=existing[2] if existing else event_id)
    return RecordingResult(job_id=existing[0], duplicate=True, status=existing[1],
                           event_id=existing[2])
