"""The reference Stripe logic: invoices credited once, refunds, subscription ordering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories
from webhooks.shared import handlers
from webhooks.shared.settings import Settings
from webhooks.worker import jobs


@pytest.fixture(autouse=True)
def _handlers(settings: Settings) -> None:
    handlers.load(settings)


def run(engine: Engine, settings: Settings, *events: dict) -> None:  # type: ignore[type-arg]
    for event in events:
        factories.insert_event_and_job(engine, event)
        jobs.process_batch(engine, settings)


def rows(engine: Engine, sql: str) -> list:  # type: ignore[type-arg]
    with engine.connect() as conn:
        return list(conn.execute(sa.text(sql)).all())


def test_invoice_paid_and_payment_succeeded_credit_once(clean_db, settings) -> None:  # type: ignore[no-untyped-def]
    invoice = factories.invoice("in_1", customer="cus_a", amount=2500, currency="eur")
    run(clean_db, settings,
        factories.stripe_event("invoice.paid", invoice),
        factories.stripe_event("invoice.payment_succeeded", invoice))
    assert rows(clean_db, "SELECT customer_id, currency, balance FROM accounts") == [
        ("cus_a", "eur", 2500)]
    assert len(rows(clean_db, "SELECT * FROM ledger_entries")) == 1
    assert rows(clean_db, "SELECT idempotency_key, kind, status FROM outbox") == [
        ("receipt:in_1", "receipt", "pending")]
    assert rows(clean_db, "SELECT count(*) FROM jobs WHERE status = 'done'") == [(2,)]


def test_refunds_debit_up_to_cumulative_amount_even_out_of_order(clean_db, settings) -> None:  # type: ignore[no-untyped-def]
    invoice = factories.invoice("in_r", customer="cus_r", amount=10000)
    run(clean_db, settings,
        factories.stripe_event("invoice.paid", invoice),
        factories.stripe_event("charge.refunded", factories.charge("ch_1", customer="cus_r",
                                                                   refunded=3000)),
        factories.stripe_event("charge.refunded", factories.charge("ch_1", customer="cus_r",
                                                                   refunded=7000)),
        # a late, older refund event: total refunded already covers it
        factories.stripe_event("charge.refunded", factories.charge("ch_1", customer="cus_r",
                                                                   refunded=3000)))
    assert rows(clean_db, "SELECT balance FROM accounts WHERE customer_id = 'cus_r'") == [(3000,)]
    amounts = sorted(r.amount for r in rows(clean_db,
                     "SELECT amount FROM ledger_entries WHERE kind = 'refund'"))
    assert amounts == [-4000, -3000]


def test_subscription_events_out_of_order_keep_the_newest(clean_db, settings) -> None:  # type: ignore[no-untyped-def]
    sub = "sub_1"
    created = factories.stripe_event("customer.subscription.created",
                                     factories.subscription(sub, "active"), created=100)
    updated = factories.stripe_event("customer.subscription.updated",
                                     factories.subscription(sub, "past_due"), created=200)
    deleted = factories.stripe_event("customer.subscription.deleted",
                                     factories.subscription(sub, "active"), created=300)
    run(clean_db, settings, deleted, created, updated)
    assert rows(clean_db, "SELECT subscription_id, status FROM subscriptions") == [
        ("sub_1", "canceled")]
    outcomes = rows(clean_db, "SELECT outcome FROM jobs ORDER BY id")
    assert [o.outcome for o in outcomes] == ["applied", "stale, skipped", "stale, skipped"]


def test_payment_failed_queues_one_email_per_event(clean_db, settings) -> None:  # type: ignore[no-untyped-def]
    event = factories.stripe_event("invoice.payment_failed", factories.invoice("in_f"),
                                   event_id="evt_failed_1")
    run(clean_db, settings, event)
    assert rows(clean_db, "SELECT idempotency_key, kind FROM outbox") == [
        ("payment_failed:evt_failed_1", "payment_failed")]


def test_missing_field_fails_after_max_attempts_with_nothing_applied(clean_db, settings) -> None:  # type: ignore[no-untyped-def]
    event = factories.stripe_event("invoice.paid", {"id": "in_x", "customer": "cus_x",
                                                    "currency": "usd"})  # no amount_paid
    factories.insert_event_and_job(clean_db, event)
    for _ in range(settings.job_max_attempts):
        jobs.process_batch(clean_db, settings)
    assert rows(clean_db, "SELECT status, attempts FROM jobs") == [("failed", 3)]
    assert rows(clean_db, "SELECT count(*) FROM ledger_entries") == [(0,)]
    assert rows(clean_db, "SELECT count(*) FROM outbox") == [(0,)]


@pytest.mark.parametrize("fixture", ["charge.refunded.guest.json",
                                     "charge.refunded.guest_beta.json"])
def test_refund_of_a_guest_charge_completes_with_no_ledger_effect(clean_db, settings,  # type: ignore[no-untyped-def]
                                                                  fixture) -> None:
    # Stripe's published charge objects with `customer: null` (tests/fixtures/providers).
    path = Path(__file__).resolve().parents[1] / "fixtures" / "providers" / "stripe" / fixture
    event = json.loads(path.read_bytes())
    assert event["type"] == "charge.refunded" and event["data"]["object"]["customer"] is None
    run(clean_db, settings, event)
    assert rows(clean_db, "SELECT status, attempts, outcome FROM jobs") == [
        ("done", 1, "guest charge: no account to debit")]
    assert rows(clean_db, "SELECT count(*) FROM ledger_entries") == [(0,)]
    assert rows(clean_db, "SELECT count(*) FROM accounts") == [(0,)]
