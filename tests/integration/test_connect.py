"""Stripe Connect sources: the livemode policy before any effect (a test-mode event of a
connected account on a live-only source is recorded and done, never credited)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ingest.app import create_app
from shared.settings import Settings
from tests import factories
from tests.conftest import STRIPE_SECRET
from worker import handlers, jobs

CONNECT_SECRET = "whsec_connect_endpoint_secret"


@pytest.fixture()
def live_connect(settings: Settings, database_url: str) -> Settings:
    handlers.load(settings)  # the reference ledger's handlers
    return Settings.from_env({
        "DATABASE_URL": database_url, "BROKER_URL": settings.broker_url or "",
        "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "STRIPE_SOURCES": "connect",
        "STRIPE_CONNECT_WEBHOOK_SECRET": CONNECT_SECRET, "STRIPE_CONNECT_CONNECT": "1",
        "STRIPE_CONNECT_LIVEMODE": "live", "JOB_RETRY_BASE_SECONDS": "0",
        "WEBHOOKS_DATA_DIR": str(settings.data_dir)})


def rows(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(sql))]


def deliver_connect(client: Any, event_id: str, *, livemode: bool) -> None:
    event = factories.stripe_event("invoice.paid", factories.invoice(f"in_{event_id}"),
                                   event_id=event_id)
    body = json.dumps({**event, "account": "acct_1Conn", "livemode": livemode}).encode()
    response = client.post("/webhooks/stripe/connect", data=body, headers={
        "Stripe-Signature": factories.stripe_signature(body, CONNECT_SECRET)})
    assert response.status_code == 200


def test_a_test_mode_event_on_a_live_only_source_is_recorded_done_and_not_credited(
        clean_db: Engine, live_connect: Settings, caplog: pytest.LogCaptureFixture) -> None:
    client = create_app(live_connect).test_client()
    deliver_connect(client, "evt_test_mode", livemode=False)
    deliver_connect(client, "evt_live_mode", livemode=True)
    with caplog.at_level(logging.INFO, logger="worker.jobs"):
        assert jobs.process_batch(clean_db, live_connect).done == 2
    assert rows(clean_db, "SELECT e.event_id, e.livemode, j.status, j.outcome FROM jobs j "
                "JOIN webhook_events e USING (provider, event_id) ORDER BY e.event_id") == [
        ("evt_live_mode", True, "done", "credited"),
        ("evt_test_mode", False, "done", "no effect: livemode false refused by source "
                                         "stripe/connect (livemode live)")]
    assert rows(clean_db, "SELECT entry_key, amount FROM ledger_entries") == [
        ("invoice:in_evt_live_mode", 1000)]
    refused = [r for r in caplog.records if "livemode refused" in r.getMessage()]
    assert [(r.event_id, r.job_id is not None) for r in refused] == [  # type: ignore[attr-defined]
        ("evt_test_mode", True)]
    # Delivered again, the live event is a duplicate: still credited once.
    deliver_connect(client, "evt_live_mode", livemode=True)
    jobs.process_batch(clean_db, live_connect)
    assert rows(clean_db, "SELECT count(*) FROM ledger_entries") == [(1,)]
