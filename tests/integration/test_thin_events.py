"""Stripe thin events (event destinations) against the fake Stripe API over real HTTP
(tests/fakes/provider_apis.py, serving Stripe's published objects) and the real Postgres:
the fake proven by the `stripe` library itself; a thin event's job fetches the event and
its related object (with the event's context) before the handler, a failed fetch fails
the attempt, and nothing is applied without a fetch; one invoice is credited and receipted
once whichever kinds of events carry it; a resolved event-generation failure applies the
object it names; thin reconciliation lists `GET /v2/core/events`."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa
import stripe
from sqlalchemy.engine import Engine

from tests import factories
from tests.conftest import STRIPE_SECRET
from tests.fakes import provider_events
from tests.fakes.provider_apis import STRIPE_KEY, FakeProviderApis
from webhooks.ingest.app import create_app
from webhooks.shared import audit, db, handlers, reconciliation
from webhooks.shared.providers import stripe_events as stripe_reconciliation
from webhooks.shared.providers import stripe_thin as thin_events
from webhooks.shared.settings import Settings
from webhooks.worker import jobs

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture()
def fake() -> Iterator[FakeProviderApis]:
    with FakeProviderApis() as running:
        yield running


@pytest.fixture()
def thin_settings(fake: FakeProviderApis, settings: Settings, database_url: str) -> Settings:
    handlers.load(settings)
    env = {"DATABASE_URL": database_url, "BROKER_URL": settings.broker_url,
           "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "JOB_RETRY_BASE_SECONDS": "0",
           "JOB_MAX_ATTEMPTS": "5", "STRIPE_API_KEY": STRIPE_KEY, "STRIPE_API_BASE": fake.url}
    return Settings.from_env(env)


def invoice(invoice_id: str, *, amount: int = 2500, customer: str = "cus_thin") -> dict[str, Any]:
    """Stripe's published invoice, paid."""
    return provider_events.stripe_object(
        "invoice", id=invoice_id, customer=customer, amount_paid=amount, currency="eur",
        status="paid", customer_email="buyer@example.com")


def thin_invoice_paid(fake: FakeProviderApis, paid: dict[str, Any], *, event_id: str,
                      context: str | None = None) -> dict[str, Any]:
    """The fake serves the full event and the invoice; returns the thin payload."""
    full = provider_events.stripe_thin_event("v1.invoice.paid", paid, event_id=event_id,
                                             created=NOW, context=context)
    fake.serve_stripe_v2(full, paid)
    return provider_events.thin_payload(full)


def rows(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(sql)).all()]


def test_the_fake_speaks_v2_as_the_stripe_library_calls_it(fake: FakeProviderApis) -> None:
    paid = invoice("in_lib")
    body = json.dumps(thin_invoice_paid(fake, paid, event_id="evt_lib", context="acct_lib"))
    client = stripe.StripeClient(STRIPE_KEY, base_addresses={"api": fake.url},
                                 max_network_retries=0)
    notification = client.parse_event_notification(
        body, factories.stripe_signature(body.encode(), STRIPE_SECRET), STRIPE_SECRET)
    assert type(notification).__name__ == "V1InvoicePaidEventNotification"
    assert str(notification.context) == "acct_lib"
    event = notification.fetch_event()
    assert (event.id, event.type, event.related_object.url) == (
        "evt_lib", "v1.invoice.paid", "/v1/invoices/in_lib")
    fetched = notification.fetch_related_object()
    assert (fetched.id, fetched.amount_paid, fetched.customer) == ("in_lib", 2500, "cus_thin")
    # the published invoice's decimal strings, as Stripe serves them
    line = fetched.lines.data[0]
    assert str(line.pricing.unit_amount_decimal) == "2500"
    assert fake.state.stripe_headers == [("/v2/core/events/evt_lib", "acct_lib", None),
                                         ("/v1/invoices/in_lib", "acct_lib", None)]
    with pytest.raises(stripe.InvalidRequestError):  # another account's object: not found
        client.raw_request("get", "/v1/invoices/in_lib")
    by_account = client.raw_request("get", "/v1/invoices/in_lib", stripe_account="acct_lib")
    assert json.loads(by_account.body)["id"] == "in_lib"
    assert fake.state.stripe_headers[-1] == ("/v1/invoices/in_lib", None, "acct_lib")
    for n in range(5):
        fake.serve_stripe_v2(provider_events.stripe_thin_event(
            "v1.invoice.paid", invoice(f"in_l{n}"), event_id=f"evt_l{n}",
            created=NOW + timedelta(seconds=n)))
    listed = client.v2.core.events.list({"limit": 2})
    assert listed.next_page_url is not None
    ids = [item.id for item in listed.auto_paging_iter()]
    assert ids == ["evt_l4", "evt_l3", "evt_l2", "evt_l1", "evt_l0"]
    assert fake.state.requests["/v2/core/events"] == 3


def test_a_thin_invoice_paid_is_credited_from_the_fetched_invoice_after_failed_fetches(
        fake: FakeProviderApis, clean_db: Engine, thin_settings: Settings,
        caplog: pytest.LogCaptureFixture) -> None:
    thin = thin_invoice_paid(fake, invoice("in_thin"), event_id="evt_thin")
    job_id = factories.insert_event_and_job(clean_db, thin)
    fake.state.rate_limited, fake.state.fail_next = 1, 1  # the first fetch 429, the next 500
    with caplog.at_level(logging.WARNING, logger="webhooks.worker.jobs"):
        jobs.process_batch(clean_db, thin_settings)
        assert rows(clean_db, "SELECT status, attempts FROM jobs") == [("pending", 1)]
        assert "RateLimitError" in rows(clean_db, "SELECT last_error FROM jobs")[0][0]
        jobs.process_batch(clean_db, thin_settings)
    assert rows(clean_db, "SELECT status, attempts FROM jobs") == [("pending", 2)]
    assert "APIError" in rows(clean_db, "SELECT last_error FROM jobs")[0][0]
    assert rows(clean_db, "SELECT count(*) FROM ledger_entries") == [(0,)]
    warnings = [r for r in caplog.records if r.getMessage() == "job attempt failed, will retry"]
    assert [(r.job_id, r.event_id) for r in warnings] == [(job_id, "evt_thin")] * 2  # type: ignore[attr-defined]
    jobs.process_batch(clean_db, thin_settings)
    assert rows(clean_db, "SELECT status, attempts FROM jobs") == [("done", 3)]
    assert rows(clean_db, "SELECT customer_id, currency, amount, entry_key FROM ledger_entries"
                ) == [("cus_thin", "eur", 2500, "invoice:in_thin")]
    assert rows(clean_db, "SELECT idempotency_key FROM outbox") == [("receipt:in_thin",)]
    # every attempt fetched (429, 500, then the event and the invoice)
    assert fake.state.requests["/v2/core/events/evt_thin"] == 3
    assert fake.state.requests["/v1/invoices/in_thin"] == 1


def test_a_signed_thin_delivery_is_recorded_by_the_ingest_and_credited_by_its_job(
        fake: FakeProviderApis, clean_db: Engine, thin_settings: Settings) -> None:
    body = json.dumps(thin_invoice_paid(fake, invoice("in_post"), event_id="evt_post")).encode()
    response = create_app(thin_settings).test_client().post(
        "/webhooks/stripe", data=body,
        headers={"Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})
    assert response.status_code == 200
    assert response.get_json()["event_id"] == "evt_post"
    assert rows(clean_db, "SELECT event_type, payload->>'object' FROM webhook_events") == [
        ("v1.invoice.paid", "v2.core.event")]
    jobs.process_batch(clean_db, thin_settings)
    assert rows(clean_db, "SELECT status FROM jobs") == [("done",)]
    assert rows(clean_db, "SELECT entry_key, amount FROM ledger_entries") == [
        ("invoice:in_post", 2500)]


def test_a_fetch_that_times_out_fails_the_attempt(
        fake: FakeProviderApis, clean_db: Engine, thin_settings: Settings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(thin_events, "FETCH_TIMEOUT_SECONDS", 0.5)
    factories.insert_event_and_job(clean_db, thin_invoice_paid(fake, invoice("in_slow"),
                                                               event_id="evt_slow"))
    fake.state.slow_next, fake.state.slow_seconds = 1, 3.0
    jobs.process_batch(clean_db, thin_settings)
    assert rows(clean_db, "SELECT status, attempts FROM jobs") == [("pending", 1)]
    assert "APIConnectionError" in rows(clean_db, "SELECT last_error FROM jobs")[0][0]
    assert rows(clean_db, "SELECT count(*) FROM ledger_entries") == [(0,)]
    jobs.process_batch(clean_db, thin_settings)
    assert rows(clean_db, "SELECT status, attempts FROM jobs") == [("done", 2)]


CONN_SECRET = "whsec_thin_connect_secret"


@pytest.fixture()
def connect_settings(thin_settings: Settings) -> Settings:
    """The platform's snapshot endpoint (`stripe`, not Connect) beside a Connect
    destination of thin events (`stripe/conn`, STRIPE_CONN_CONNECT=1)."""
    env = {"DATABASE_URL": thin_settings.database_url or "",
           "BROKER_URL": thin_settings.broker_url or "", "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
           "JOB_RETRY_BASE_SECONDS": "0", "JOB_MAX_ATTEMPTS": "5", "STRIPE_API_KEY": STRIPE_KEY,
           "STRIPE_API_BASE": thin_settings.api_base("stripe") or "", "STRIPE_SOURCES": "conn",
           "STRIPE_CONN_WEBHOOK_SECRET": CONN_SECRET, "STRIPE_CONN_EVENTS": "thin",
           "STRIPE_CONN_CONNECT": "1", "STRIPE_CONN_API_KEY": STRIPE_KEY}
    return Settings.from_env(env)


def test_a_connected_accounts_thin_event_is_fetched_with_its_context(
        fake: FakeProviderApis, clean_db: Engine, connect_settings: Settings) -> None:
    body = json.dumps(thin_invoice_paid(fake, invoice("in_acct", customer="cus_conn"),
                                        event_id="evt_acct", context="acct_1Conn")).encode()
    answer = create_app(connect_settings).test_client().post(
        "/webhooks/stripe/conn", data=body,
        headers={"Stripe-Signature": factories.stripe_signature(body, CONN_SECRET)})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert rows(clean_db, "SELECT source, account FROM webhook_events") == [
        ("conn", "acct_1Conn")]
    jobs.process_batch(clean_db, connect_settings)
    assert fake.state.stripe_headers == [("/v2/core/events/evt_acct", "acct_1Conn", None),
                                         ("/v1/invoices/in_acct", "acct_1Conn", None)]
    assert rows(clean_db, "SELECT status FROM jobs") == [("done",)]
    assert rows(clean_db, "SELECT customer_id, amount FROM ledger_entries") == [("cus_conn", 2500)]


def test_a_thin_events_context_counts_only_at_a_connect_source(
        fake: FakeProviderApis, clean_db: Engine, connect_settings: Settings) -> None:
    """At a source that is not Connect, the events are the platform's: a thin event's
    `context` is neither recorded as its account nor sent as Stripe-Context (the platform's
    key would act in that account), so the job fetches the platform's event, as the
    source's own events are."""
    paid = invoice("in_platform", customer="cus_platform")
    full = provider_events.stripe_thin_event("v1.invoice.paid", paid, event_id="evt_ctx",
                                             created=NOW)
    fake.serve_stripe_v2(full, paid)
    # Another account's invoice of the same id: what the context would have fetched.
    fake.state.stripe_objects[("acct_someone_else", "/v1/invoices/in_platform")] = invoice(
        "in_platform", customer="cus_someone_else", amount=999_999)
    body = json.dumps({**provider_events.thin_payload(full),
                       "context": "acct_someone_else"}).encode()
    answer = create_app(connect_settings).test_client().post(
        "/webhooks/stripe", data=body,
        headers={"Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})
    assert answer.status_code == 200
    assert rows(clean_db, "SELECT source, account FROM webhook_events") == [("stripe", None)]
    jobs.process_batch(clean_db, connect_settings)
    assert fake.state.stripe_headers == [("/v2/core/events/evt_ctx", None, None),
                                         ("/v1/invoices/in_platform", None, None)]
    assert rows(clean_db, "SELECT status FROM jobs") == [("done",)]
    assert rows(clean_db, "SELECT customer_id, amount FROM ledger_entries") == [
        ("cus_platform", 2500)]


@pytest.mark.parametrize("event_id", ["evt_thin_trav/../../../v1/customers/cus_victim",
                                      "evt_thin_q?limit=3&types[]=x", "evt_thin_frag#x",
                                      "evt_thin_pct%2F..%2Fx", "evt ok"])
def test_a_thin_events_id_is_one_segment_of_its_fetch_path(
        fake: FakeProviderApis, clean_db: Engine, thin_settings: Settings,
        event_id: str) -> None:
    """The id is percent-encoded into the path: no dot segment, query or fragment of it
    reaches Stripe as such, and the event is fetched by its id (Stripe decodes the
    segment, as the fake does)."""
    factories.insert_event_and_job(clean_db, thin_invoice_paid(fake, invoice("in_seg"),
                                                               event_id=event_id))
    jobs.process_batch(clean_db, thin_settings)
    assert [path for path, _, _ in fake.state.stripe_headers] == [
        "/v2/core/events/" + quote(event_id, safe=""), "/v1/invoices/in_seg"]
    assert rows(clean_db, "SELECT status FROM jobs") == [("done",)]


@pytest.mark.parametrize("event_id", ["..", "."])
def test_a_thin_event_whose_id_is_a_dot_segment_fails_with_no_fetch(
        fake: FakeProviderApis, clean_db: Engine, thin_settings: Settings,
        event_id: str) -> None:
    factories.insert_event_and_job(clean_db, thin_invoice_paid(fake, invoice("in_dots"),
                                                               event_id=event_id))
    jobs.process_batch(clean_db, thin_settings)
    status, error = rows(clean_db, "SELECT status, last_error FROM jobs")[0]
    assert status == "failed" and "cannot be fetched" in error
    assert fake.state.stripe_headers == []


def carriers(fake: FakeProviderApis, invoice_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A snapshot invoice.paid and a thin v1.invoice.paid of one invoice."""
    paid = invoice(invoice_id)
    snapshot = provider_events.stripe_event("invoice.paid", paid, event_id=f"evt_s_{invoice_id}",
                                            created=int(NOW.timestamp()))
    return snapshot, thin_invoice_paid(fake, paid, event_id=f"evt_t_{invoice_id}")


@pytest.mark.parametrize("thin_first", [False, True])
def test_snapshot_and_thin_carriers_of_one_invoice_credit_and_receipt_once(
        fake: FakeProviderApis, clean_db: Engine, thin_settings: Settings,
        thin_first: bool) -> None:
    snapshot, thin = carriers(fake, "in_both")
    for event in ([thin, snapshot] if thin_first else [snapshot, thin]):
        factories.insert_event_and_job(clean_db, event)
        jobs.process_batch(clean_db, thin_settings)
    assert rows(clean_db, "SELECT status, count(*) FROM jobs GROUP BY status") == [("done", 2)]
    assert rows(clean_db, "SELECT amount FROM ledger_entries") == [(2500,)]
    assert rows(clean_db, "SELECT balance FROM accounts") == [(2500,)]
    assert rows(clean_db, "SELECT idempotency_key FROM outbox") == [("receipt:in_both",)]


def test_snapshot_and_thin_carriers_at_once_on_two_connections_credit_once(
        fake: FakeProviderApis, clean_db: Engine, thin_settings: Settings) -> None:
    rounds = 6
    for n in range(rounds):
        snapshot, thin = carriers(fake, f"in_race{n}")
        pair = [snapshot, thin] if n % 2 else [thin, snapshot]
        for event in pair:
            factories.insert_event_and_job(clean_db, event)
        barrier = threading.Barrier(2)

        def worker(barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            jobs.process_batch(clean_db, thin_settings, limit=1)  # one job each, at once

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    while rows(clean_db, "SELECT count(*) FROM jobs WHERE status = 'pending'")[0][0]:
        jobs.process_batch(clean_db, thin_settings)  # any job deferred after a conflict
    assert rows(clean_db, "SELECT count(*) FROM jobs WHERE status = 'done'") == [(2 * rounds,)]
    assert rows(clean_db, "SELECT count(*), count(DISTINCT entry_key) FROM ledger_entries"
                ) == [(rounds, rounds)]
    assert rows(clean_db, "SELECT balance FROM accounts") == [(2500 * rounds,)]
    assert rows(clean_db, "SELECT count(*) FROM outbox") == [(rounds,)]
    assert audit.audit(clean_db).violations == []


def test_a_resolved_event_generation_failure_applies_the_object_it_names_once(
        fake: FakeProviderApis, clean_db: Engine, thin_settings: Settings) -> None:
    paid = invoice("in_lost", customer="cus_lost")
    fake.state.stripe_objects[("acct_lost", "/v1/invoices/in_lost")] = paid
    impact = {"event_type": "invoice.paid", "related_object_id": "in_lost",
              "related_object_type": "invoice", "account": "acct_lost"}
    full = provider_events.stripe_thin_event(
        thin_events.GENERATION_FAILURE_RESOLVED, None, event_id="evt_resolved", created=NOW,
        data={"impact": impact})
    fake.serve_stripe_v2(full)
    factories.insert_event_and_job(clean_db, provider_events.thin_payload(full))
    jobs.process_batch(clean_db, thin_settings)
    assert rows(clean_db, "SELECT status, outcome FROM jobs") == [
        ("done", "invoice.paid: credited")]
    assert ("/v1/invoices/in_lost", "acct_lost", None) in fake.state.stripe_headers
    # Its notification, committed with the job (shared/notifications.py).
    [(kind, count, details)] = rows(clean_db, "SELECT kind, count, details FROM notifications")
    assert (kind, count) == ("stripe.event_generation_failed", 1)
    assert (details["object_id"], details["event_type"], details["account"]) == (
        "in_lost", "invoice.paid", "acct_lost")
    # The invoice's own event, arriving after all, credits nothing more.
    factories.insert_event_and_job(clean_db, provider_events.stripe_event(
        "invoice.paid", paid, event_id="evt_late", created=int(NOW.timestamp())))
    jobs.process_batch(clean_db, thin_settings)
    assert rows(clean_db, "SELECT customer_id, amount FROM ledger_entries") == [("cus_lost", 2500)]
    assert rows(clean_db, "SELECT count(*) FROM outbox") == [(1,)]


def test_thin_reconciliation_lists_v2_events_and_records_each_once(
        fake: FakeProviderApis, database_url: str, clean_db: Engine, thin_settings: Settings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stripe_reconciliation, "PAGE", 2)
    for n in range(5):
        thin_invoice_paid(fake, invoice(f"in_rec{n}", amount=100 + n), event_id=f"evt_rec{n}")
    old = provider_events.stripe_thin_event("v1.invoice.paid", invoice("in_old"),
                                            event_id="evt_old", created=NOW - timedelta(days=9))
    fake.serve_stripe_v2(old)
    engine = db.create_engine(thin_settings, pool_size=2, autocommit=True)
    try:
        source = stripe_reconciliation.thin_events(STRIPE_KEY, fake.url)
        since = NOW - timedelta(hours=1)
        first = reconciliation.reconcile(engine, source, "stripe", since)
        again = reconciliation.reconcile(engine, source, "stripe", since)
    finally:
        engine.dispose()
    assert (first.listed, first.recorded, again.listed, again.recorded) == (5, 5, 5, 0)
    assert fake.state.requests["/v2/core/events"] == 6  # three pages, twice
    recorded = rows(clean_db, "SELECT event_id, received_via, payload->>'object' "
                              "FROM webhook_events ORDER BY event_id")
    assert recorded == [(f"evt_rec{n}", "reconcile", "v2.core.event") for n in range(5)]
    while rows(clean_db, "SELECT count(*) FROM jobs WHERE status = 'pending'")[0][0]:
        jobs.process_batch(clean_db, thin_settings)
    assert rows(clean_db, "SELECT sum(amount), count(*) FROM ledger_entries") == [(510, 5)]


# --- a thin source's deliveries, verified by the library's thin-event parser ----------

DEST_NEW, DEST_OLD = "whsec_destination_new", "whsec_destination_old"


@pytest.fixture()
def destination(thin_settings: Settings, fake: FakeProviderApis) -> Settings:
    """The platform's snapshot endpoint (`stripe`) beside a thin-event destination of
    connected accounts (`stripe/dest`, Connect) whose secret is being rotated (new, old)."""
    return Settings.from_env({
        "DATABASE_URL": thin_settings.database_url or "",
        "BROKER_URL": thin_settings.broker_url or "", "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
        "JOB_RETRY_BASE_SECONDS": "0", "STRIPE_API_BASE": fake.url, "STRIPE_SOURCES": "dest",
        "STRIPE_DEST_WEBHOOK_SECRET": f"{DEST_NEW},{DEST_OLD}", "STRIPE_DEST_EVENTS": "thin",
        "STRIPE_DEST_API_KEY": STRIPE_KEY, "STRIPE_DEST_CONNECT": "1"})


def deliver(settings: Settings, path: str, body: bytes, secret: str,
            timestamp: int | None = None) -> Any:
    return create_app(settings).test_client().post(path, data=body, headers={
        "Stripe-Signature": factories.stripe_signature(body, secret, timestamp)})


def test_the_library_parses_a_thin_destinations_delivery_under_each_secret(
        fake: FakeProviderApis, clean_db: Engine, destination: Settings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Verified by `StripeClient.parse_event_notification` (spied on), under the old secret
    of a rotation too, and recorded exactly as sent, with its context as the account."""
    from webhooks.shared.providers import stripe as stripe_provider

    calls: list[str] = []
    parse = stripe.StripeClient.parse_event_notification

    def spy(self: stripe.StripeClient, raw: Any, header: Any, secret: Any,
            tolerance: int = 300) -> Any:
        calls.append(secret)
        return parse(self, raw, header, secret, tolerance)

    monkeypatch.setattr(stripe.StripeClient, "parse_event_notification", spy)
    stripe_provider._thin_parser.cache_clear()
    sent = json.dumps(thin_invoice_paid(fake, invoice("in_dest"), event_id="evt_dest",
                                        context="acct_dest"), indent=1).encode()
    response = deliver(destination, "/webhooks/stripe/dest", sent, DEST_OLD)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert calls == [DEST_NEW, DEST_OLD]
    assert rows(clean_db, "SELECT source, account, livemode, payload FROM webhook_events") == [
        ("dest", "acct_dest", False, json.loads(sent))]
    assert deliver(destination, "/webhooks/stripe/dest", sent, STRIPE_SECRET).status_code == 400
    assert deliver(destination, "/webhooks/stripe", sent, DEST_NEW).status_code == 400
    jobs.process_batch(clean_db, destination)
    assert rows(clean_db, "SELECT status FROM jobs") == [("done",)]
    assert rows(clean_db, "SELECT customer_id, amount FROM ledger_entries") == [("cus_thin", 2500)]


def test_a_thin_source_refuses_what_is_not_a_thin_event_and_a_future_timestamp(
        fake: FakeProviderApis, clean_db: Engine, destination: Settings) -> None:
    """A snapshot event signed for the destination is refused (400, nothing written): the
    parser says it is not a thin event, and recorded it would never be fetched. So are a
    thin event without its related object and a timestamp ahead of the tolerance, which
    the library alone would accept."""
    snapshot = provider_events.stripe_event("invoice.paid", invoice("in_snap"),
                                            event_id="evt_snap", created=int(NOW.timestamp()))
    thin = thin_invoice_paid(fake, invoice("in_dest2"), event_id="evt_dest2")
    no_related = {key: value for key, value in thin.items() if key != "related_object"}
    ahead = int(NOW.timestamp()) + destination.tolerance_seconds + 60
    refused = [
        deliver(destination, "/webhooks/stripe/dest", json.dumps(snapshot).encode(), DEST_NEW),
        deliver(destination, "/webhooks/stripe/dest", json.dumps(no_related).encode(), DEST_NEW),
        deliver(destination, "/webhooks/stripe/dest", b"[1, 2]", DEST_NEW),
        deliver(destination, "/webhooks/stripe/dest", json.dumps(thin).encode(), DEST_NEW,
                timestamp=ahead)]
    assert [response.status_code for response in refused] == [400, 400, 400, 400]
    assert "not a Stripe thin event" in refused[0].get_data(as_text=True)
    assert rows(clean_db, "SELECT count(*) FROM webhook_events") == [(0,)]
    # The snapshot endpoint takes the same snapshot event.
    assert deliver(destination, "/webhooks/stripe", json.dumps(snapshot).encode(),
                   STRIPE_SECRET).status_code == 200


def test_a_thin_event_at_a_snapshot_source_without_an_api_key_fails_saying_why(
        fake: FakeProviderApis, clean_db: Engine, settings: Settings) -> None:
    """Signed with the snapshot source's own secret, it is Stripe's: recorded as sent.
    Its job cannot fetch it without the source's API key, so it fails at once (no retry
    can help), nothing applied, the reason in last_error. (With the key, it is fetched
    and credited: test_a_signed_thin_delivery_is_recorded_by_the_ingest_...)"""
    handlers.load(settings)
    keyless = Settings.from_env({"DATABASE_URL": settings.database_url or "",
                                 "BROKER_URL": settings.broker_url or "",
                                 "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
                                 "STRIPE_API_BASE": fake.url, "JOB_MAX_ATTEMPTS": "5"})
    body = json.dumps(thin_invoice_paid(fake, invoice("in_nokey"), event_id="evt_nokey")).encode()
    assert deliver(keyless, "/webhooks/stripe", body, STRIPE_SECRET).status_code == 200
    jobs.process_batch(clean_db, keyless)
    status, attempts, error = rows(clean_db, "SELECT status, attempts, last_error FROM jobs")[0]
    assert (status, attempts) == ("failed", 1)
    assert "needs its API key" in error
    assert rows(clean_db, "SELECT count(*) FROM ledger_entries") == [(0,)]
    assert fake.state.stripe_headers == []


def test_a_thin_event_no_handler_names_is_done_with_no_fetch_at_any_source(
        fake: FakeProviderApis, clean_db: Engine, thin_settings: Settings) -> None:
    """A thin event of a type no handler names (a meter's error report) has nothing to
    apply: its job is done with no effect and fetches nothing, at the default source without
    an API key as at one with a key. Only a type some handler names needs the fetch."""
    keyless = Settings.from_env({"DATABASE_URL": thin_settings.database_url or "",
                                 "BROKER_URL": thin_settings.broker_url or "",
                                 "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
                                 "STRIPE_API_BASE": fake.url, "JOB_MAX_ATTEMPTS": "5"})
    for config, event_id in ((keyless, "evt_meter_keyless"), (thin_settings, "evt_meter_key")):
        full = provider_events.stripe_thin_event(
            "v1.billing.meter.error_report_triggered", {"id": "mtr_1", "object": "billing.meter"},
            event_id=event_id, created=NOW)
        full["related_object"]["url"] = "/v1/billing/meters/mtr_1"
        body = json.dumps(provider_events.thin_payload(full)).encode()
        assert deliver(config, "/webhooks/stripe", body, STRIPE_SECRET).status_code == 200
        jobs.process_batch(clean_db, config)
    assert rows(clean_db, "SELECT event_id, status, outcome, last_error FROM jobs ORDER BY id") \
        == [("evt_meter_keyless", "done", "no handler", None),
            ("evt_meter_key", "done", "no handler", None)]
    assert fake.state.stripe_headers == []
