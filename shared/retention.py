"""Retention (`webhooks prune`, the clock's nightly tick).

- Events, jobs and search documents: whole days dropped, their unfinished rows kept
  (shared/partitions.py: `prune`), and the dedup keys past DEDUP_HORIZON_DAYS (never
  sooner than the events: a key outlives its event, so a redelivery of a pruned event is
  still a duplicate).
- Duplicate records older than `days`, in bounded batches (one row per duplicate delivery:
  a fraction of the events).
- Notifications sent or failed more than `days` ago (their deliveries with them), and the
  coalescing windows that closed before then.

Never touches pending or failed work, the ledger, or the outbox (whose keys keep emails
unique forever).
"""

from __future__ import annotations

from sqlalchemy import TextClause
from sqlalchemy.engine import Engine

from webhooks.shared import partitions, queries

BATCH_SIZE = 1000


def prune(engine: Engine, days: int, horizon_days: int,
          batch_size: int = BATCH_SIZE) -> partitions.Pruned:
    """Retention of everything above; returns what went of the events."""
    pruned = partitions.prune(engine, days, horizon_days, batch_size)
    _in_batches(engine, queries.DuplicateDeleteOld, days, batch_size)
    _prune_notifications(engine, days, batch_size)
    return pruned


def _in_batches(engine: Engine, statement: TextClause, days: int, batch_size: int) -> None:
    while True:
        with engine.begin() as conn:
            deleted = conn.execute(statement, {"days": days, "limit": batch_size}).rowcount
        if deleted < batch_size:
            return


def _prune_notifications(engine: Engine, days: int, batch_size: int) -> None:
    while True:
        with engine.begin() as conn:
            deleted = conn.execute(queries.NotificationDeleteFinished,
                                   {"days": days, "limit": batch_size}).rowcount
            conn.execute(queries.NotificationWindowDeleteClosed, {"days": days})
        if deleted < batch_size:
            return
