"""The example app examples/disputes (docs/calls.md), named in WEBHOOK_HANDLERS as a team
runs it: on a fresh database `webhooks migrate` creates its table in a version table of
its own; a `charge.dispute.created` delivered twice and the same dispute's
`charge.dispute.updated` queue one refund of its charge; the worker's call dispatch makes
it at a fake Stripe (tests/fakes/provider_apis.py, driven through the `stripe` library as
in production), through a lost answer, with the call's key as Stripe's Idempotency-Key:
one refund at Stripe, the call `sent` with the refund in its answer, which the dispute's
`charge.dispute.closed`, applied later, reads with `ctx.call_result`. A chargeback, whose
charge Stripe no longer refunds, queues nothing.

The repository holds no published dispute fixture (stripe/openapi's are not copied here):
the disputes are built from the documented shape of Stripe's Dispute object
(docs.stripe.com/api/disputes/object), the fields the app reads and their neighbours,
without `evidence`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories
from tests.conftest import ROOT, STRIPE_SECRET, broker_url
from tests.fakes.provider_apis import STRIPE_KEY, FakeProviderApis
from webhooks.shared import db, hooks, recording
from webhooks.shared.settings import Settings
from webhooks.worker import calls as dispatcher
from webhooks.worker import jobs

APP = "examples.disputes"
VERSIONS = "alembic_version_examples_disputes"
CHARGE, OTHER_CHARGE = "ch_3PdisputedC1aRge0000001", "ch_3PchargebackC1aRge00002"
KEY = f"refund:{CHARGE}"
CREATED = 1_733_450_000  # the dispute's, and its first event's


def dispute(dispute_id: str, charge: str, status: str, *, refundable: bool,
            amount: int = 4200) -> dict[str, Any]:
    """A Dispute as Stripe's API reference describes it: an inquiry (`warning_*` statuses,
    the charge still refundable) or a chargeback (funds withdrawn, no refund)."""
    return {
        "id": dispute_id, "object": "dispute", "amount": amount,
        "balance_transactions": [], "charge": charge, "created": CREATED,
        "currency": "usd", "enhanced_eligibility_types": [],
        "evidence_details": {"due_by": CREATED + 7 * 86400, "has_evidence": False,
                             "past_due": False, "submission_count": 0},
        "is_charge_refundable": refundable, "livemode": False, "metadata": {},
        "network_reason_code": "10.4", "payment_intent": f"pi_{charge[3:]}",
        "payment_method_details": {"card": {"brand": "visa", "case_type": (
            "inquiry" if refundable else "chargeback"), "network_reason_code": "10.4"},
            "type": "card"},
        "reason": "fraudulent", "status": status,
    }


def event(event_type: str, event_id: str, obj: dict[str, Any], after: int) -> dict[str, Any]:
    return {**factories.stripe_event(event_type, obj, event_id=event_id,
                                     created=CREATED + after),
            "api_version": "2024-06-20", "livemode": False, "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None}}


def webhooks(*args: str, env: dict[str, str]) -> str:
    """`webhooks ARGS` as an operator runs it, in a process of its own; its output."""
    done = subprocess.run([sys.executable, "-m", "webhooks", *args], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def rows(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(sql))]


@pytest.fixture()
def fake() -> Iterator[FakeProviderApis]:
    with FakeProviderApis() as running:
        yield running


@pytest.fixture()
def migrated(fresh_database: tuple[str, Engine]) -> tuple[str, Engine]:
    """A fresh database, migrated by `webhooks migrate` with the app named."""
    url, engine = fresh_database
    env = {"DATABASE_URL": url, "BROKER_URL": broker_url(), "WEBHOOK_HANDLERS": APP}
    assert f"{APP}: empty -> disputes_0001" in webhooks("migrate", env=env)
    assert rows(engine, f"SELECT version_num FROM {VERSIONS}") == [("disputes_0001",)]
    webhooks("migrate", "--check", env=env)  # its METADATA is what the database holds
    return url, engine


def test_a_disputed_charge_is_refunded_once_at_stripe_and_a_later_job_reads_the_refund(
        migrated: tuple[str, Engine], fake: FakeProviderApis, tmp_path: Path) -> None:
    url, engine = migrated
    settings = Settings.from_env({
        "DATABASE_URL": url, "BROKER_URL": broker_url(), "WEBHOOK_HANDLERS": APP,
        "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "STRIPE_API_KEY": STRIPE_KEY,
        "STRIPE_API_BASE": fake.url, "JOB_RETRY_BASE_SECONDS": "0",
        "WEBHOOKS_DATA_DIR": str(tmp_path / "data")})
    assert settings.call_targets["stripe"].key_hours == 24  # CALL_STRIPE_KEY_HOURS unset
    hooks.load(settings.handler_modules)
    ingest = db.create_engine(settings, pool_size=1, autocommit=True)

    def deliver(*events: dict[str, Any]) -> list[bool]:
        """Through the ingest's own recording: each one's `duplicate`."""
        return [recording.record_event(ingest, "stripe", e["id"], e["type"],
                                       json.dumps(e).encode()).duplicate for e in events]

    inquiry = dispute("dp_1PinquiryD1spute000001", CHARGE, "warning_needs_response",
                      refundable=True)
    created = event("charge.dispute.created", "evt_dp_created", inquiry, 0)
    updated = event("charge.dispute.updated", "evt_dp_updated",
                    {**inquiry, "status": "warning_under_review"}, 60)
    chargeback = event("charge.dispute.created", "evt_dp_chargeback", dispute(
        "dp_1PchargebackD1spute0002", OTHER_CHARGE, "needs_response", refundable=False), 0)
    try:
        assert deliver(created, created, updated, chargeback) == [False, True, False, False]
        assert jobs.process_batch(engine, settings).done == 3
        assert sorted(str(o) for (o,) in rows(engine, "SELECT outcome FROM jobs")) == [
            "recorded; refund queued", "recorded; the charge cannot be refunded",
            "refund already queued"]
        assert rows(engine, "SELECT key, target, method, path, params, status FROM calls") == [
            (KEY, "stripe", "POST", "/v1/refunds",
             {"charge": CHARGE, "amount": 4200, "reason": "fraudulent",
              "metadata[dispute]": inquiry["id"]}, "pending")]

        # The refund is made, and its answer lost: sent again with the key, Stripe replays it.
        fake.state.drop_after_create = 1
        first = dispatcher.dispatch_due(engine, settings)
        assert (first.sent, first.retried) == (0, 1)
        assert dispatcher.dispatch_due(engine, settings).sent == 1
        [refund_id] = fake.state.created[KEY]
        assert fake.state.created == {KEY: [refund_id]}  # one refund at Stripe for the key
        assert fake.state.stripe_posts == [("/v1/refunds", KEY, None, False),
                                           ("/v1/refunds", KEY, None, True)]
        refund = fake.state.posted_objects[refund_id]
        assert (refund["charge"], refund["amount"], refund["reason"], refund["metadata"]) == (
            CHARGE, 4200, "fraudulent", {"dispute": inquiry["id"]})
        assert rows(engine, "SELECT status, attempts, response_status, response->>'id' "
                            "FROM calls") == [("sent", 2, 200, refund_id)]
        assert dispatcher.dispatch_due(engine, settings).claimed == 0

        # A later job of the dispute reads the sent call's answer.
        closed = event("charge.dispute.closed", "evt_dp_closed",
                       {**inquiry, "status": "warning_closed"}, 120)
        assert deliver(closed, created) == [False, True]
        assert jobs.process_batch(engine, settings).done == 1
        assert rows(engine, "SELECT outcome FROM jobs WHERE event_id = 'evt_dp_closed'") == [
            (f"closed: warning_closed; refunded by {refund_id}",)]
    finally:
        ingest.dispose()
    assert rows(engine, "SELECT dispute_id, charge_id, amount, status, refund_id "
                        "FROM disputes ORDER BY dispute_id") == [
        ("dp_1PchargebackD1spute0002", OTHER_CHARGE, 4200, "needs_response", None),
        (inquiry["id"], CHARGE, 4200, "warning_closed", refund_id)]
    assert len(fake.state.stripe_posts) == 2  # nothing more was sent
