"""Retention (`webhooks prune`, the clock's nightly tick): delete events whose job is
`done` and finished more than `days` ago, with their jobs, duplicate records and search
documents, in bounded batches so no lock is held for long.

Notifications sent or failed more than `days` ago go too (their deliveries with them),
and the coalescing windows that closed before then.

Never touches pending or failed work, the ledger, or the outbox (whose keys keep emails
unique forever). Pruning ends duplicate detection for those events: keep RETENTION_DAYS
well beyond the providers' retry windows (Stripe retries for up to 3 days).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from webhooks.shared import queries

BATCH_SIZE = 1000


def prune(engine: Engine, days: int, batch_size: int = BATCH_SIZE) -> int:
    """Delete finished events (and jobs) older than days; returns how many events."""
    total = 0
    while True:
        with engine.begin() as conn:
            deleted = conn.execute(queries.EventDeleteFinished,
                                   {"days": days, "limit": batch_size}).scalar_one()
        total += deleted
        if deleted < batch_size:
            break
    _prune_notifications(engine, days, batch_size)
    return total


def _prune_notifications(engine: Engine, days: int, batch_size: int) -> None:
    while True:
        with engine.begin() as conn:
            deleted = conn.execute(queries.NotificationDeleteFinished,
                                   {"days": days, "limit": batch_size}).rowcount
            conn.execute(queries.NotificationWindowDeleteClosed, {"days": days})
        if deleted < batch_size:
            return
