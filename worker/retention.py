"""`webhooks prune` and the clock's nightly retention.

Deletes events whose job is `done` and finished more than `days` ago, with their jobs and
duplicate records (ON DELETE CASCADE), in bounded batches so no lock is held for long.
Never touches pending or failed work, the ledger, or the outbox (whose keys keep emails
unique forever). Pruning ends duplicate detection for those events: keep RETENTION_DAYS
well beyond the providers' retry windows (Stripe retries for up to 3 days).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

BATCH_SIZE = 1000

# A bounded batch of finished events; SKIP LOCKED keeps two pruners out of each other's way.
EventDeleteFinished = sa.text("""
    DELETE FROM webhook_events e
    USING (
        SELECT j.provider, j.event_id FROM jobs j
        WHERE j.status = 'done' AND j.finished_at < now() - make_interval(days => :days)
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ) old
    WHERE e.provider = old.provider AND e.event_id = old.event_id
""")


def prune(engine: Engine, days: int, batch_size: int = BATCH_SIZE) -> int:
    """Delete finished events (and jobs) older than days; returns how many events."""
    total = 0
    while True:
        with engine.begin() as conn:
            deleted = conn.execute(EventDeleteFinished, {"days": days, "limit": batch_size})
        total += deleted.rowcount
        if deleted.rowcount < batch_size:
            return total
