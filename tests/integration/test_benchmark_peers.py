"""procrastinate's jobs in the peers benchmark (benchmarks/peers.py) are the invoices the
worker scenario seeds: the same customers, amounts, currencies and ids, job for job."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchmarks import peers, scenarios, stack


def test_the_deferred_jobs_are_the_seeded_invoices(clean_db: Engine, database_url: str,
                                                   tmp_path: Path) -> None:
    target = stack.Target(database_url, "redis://127.0.0.1:6379/7", tmp_path)
    scenarios.seed_jobs(target, 3)
    with clean_db.connect() as conn:
        seeded = conn.execute(sa.text(
            "SELECT e.event_id, e.payload -> 'data' -> 'object' FROM jobs j "
            "JOIN webhook_events e USING (event_id) ORDER BY j.id")).all()
    assert [{"customer_id": invoice["customer"], "currency": invoice["currency"],
             "amount": invoice["amount_paid"], "invoice_id": invoice["id"],
             "event_id": event_id} for event_id, invoice in seeded] == peers.seeded_jobs(3)
