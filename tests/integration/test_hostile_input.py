"""Hostile bodies against the real Postgres (docs/ingress.md, "Hostile bodies"): a number
that Postgres and Python read differently is refused at the ingest; a row that Python
cannot load fails its own job, never the claim, and is shown as text."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories
from tests.conftest import STRIPE_SECRET
from webhooks.ingest.app import create_app
from webhooks.shared import db, events, handlers
from webhooks.worker import jobs

POISON_NUMBERS = ["1e5000", "-1e400", "1e-400", "1e308", "1" * 5000, "NaN", "Infinity"]


def _count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


@pytest.mark.parametrize("number", POISON_NUMBERS)
def test_a_number_that_does_not_survive_postgres_is_refused_at_the_ingest(  # type: ignore[no-untyped-def]
        settings, clean_db, number) -> None:
    body = ('{"id": "evt_poison", "object": "event", "type": "customer.updated", '
            f'"created": 1767225600, "data": {{"object": {{"id": "cus_p", "n": {number}}}}}}}'
            ).encode()
    client = create_app(settings).test_client()
    response = client.post("/webhooks/stripe", data=body, headers={
        "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})
    assert response.status_code == 400
    assert _count(clean_db, "webhook_events") == 0 and _count(clean_db, "jobs") == 0


@pytest.mark.parametrize("number", ["1e20", "1.5e-7", "2.50E3", "0e-400", "-0.0", "12.5",
                                    "1" * 4000])
def test_numbers_that_survive_are_recorded(settings, clean_db, number) -> None:  # type: ignore[no-untyped-def]
    body = ('{"id": "evt_big", "object": "event", "type": "customer.updated", '
            f'"created": 1767225600, "data": {{"object": {{"n": {number}}}}}}}').encode()
    client = create_app(settings).test_client()
    response = client.post("/webhooks/stripe", data=body, headers={
        "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})
    assert response.status_code == 200, response.get_data(as_text=True)
    with clean_db.connect() as conn:
        stored = conn.execute(sa.text("SELECT payload FROM webhook_events")).scalar_one()
    assert stored["data"]["object"]["n"] == json.loads(number)


def test_a_row_python_cannot_load_fails_its_own_job_and_the_others_run(  # type: ignore[no-untyped-def]
        settings, clean_db) -> None:
    """A poison row stored before the ingest refused such numbers (or by other means):
    the claim does not load it, so the batch runs; the poison job fails with the reason."""
    handlers.load(settings)
    with clean_db.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO webhook_events (provider, source, event_id, event_type, payload) "
            "VALUES ('stripe', 'stripe', 'evt_poison', 'customer.updated', "
            "'{\"id\": \"evt_poison\", \"data\": {\"object\": {\"n\": 1e5000}}}'::jsonb)"))
        poison = conn.execute(sa.text(
            "INSERT INTO jobs (provider, source, event_id, event_type) VALUES "
            "('stripe', 'stripe', 'evt_poison', 'customer.updated') RETURNING id")).scalar_one()
    good = factories.insert_event_and_job(clean_db, factories.stripe_event(
        "invoice.paid", factories.invoice("in_after", customer="cus_after", amount=700)))
    for _ in range(3):
        jobs.process_batch(clean_db, settings, limit=10)
    with clean_db.connect() as conn:
        rows = dict(conn.execute(sa.text("SELECT id, status FROM jobs")).all())
        error = conn.execute(sa.text("SELECT last_error FROM jobs WHERE id = :id"),
                             {"id": poison}).scalar_one()
        balance = conn.execute(sa.text(
            "SELECT balance FROM accounts WHERE customer_id = 'cus_after'")).scalar_one()
    assert rows == {poison: "failed", good: "done"} and balance == 700
    assert "cannot be loaded" in error and "4300" in error
    with db.transaction(clean_db) as conn:
        detail = events.show_event(conn, "stripe", "evt_poison")
    assert detail is not None and "4300" in detail.event["payload_error"]
    assert '"n": 1' in detail.event["payload"]  # the text Postgres holds


def test_a_large_payload_of_distinct_words_is_recorded_and_found(settings, clean_db) -> None:  # type: ignore[no-untyped-def]
    """1.5 MB of distinct words overflows a tsvector (1 MB); the search document of a large
    payload is its beginning, so the insert and the job's document succeed and the event
    is still found."""
    words = " ".join(f"w{n:011x}" for n in range(120_000))  # 1.56 MB, 120,000 distinct
    event = {"id": "evt_large", "object": "event", "type": "invoice.updated",
             "created": 1767225600, "data": {"object": {"id": "in_large", "memo": "needle",
                                                        "description": words}}}
    body = json.dumps(event).encode()
    assert len(body) > 1_500_000
    client = create_app(settings).test_client()
    response = client.post("/webhooks/stripe", data=body, headers={
        "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})
    assert response.status_code == 200, response.get_data(as_text=True)
    # Its document is written by its job's marking statement: that must not fail either.
    assert jobs.process_batch(clean_db, settings).done == 1
    with db.transaction(clean_db) as conn:
        by_id = events.list_events(conn, events.EventFilter(search="evt_large"))
        by_word = events.list_events(conn, events.EventFilter(search="needle"))
    assert [row.event_id for row in by_id.events] == ["evt_large"]
    assert [row.event_id for row in by_word.events] == ["evt_large"]


UNSIGNED_IDS = {  # provider: (its signature header, the id header, the type header)
    "github": ("X-Hub-Signature-256", "X-GitHub-Delivery", "X-GitHub-Event"),
    "shopify": ("X-Shopify-Hmac-Sha256", "X-Shopify-Webhook-Id", "X-Shopify-Topic"),
}


@pytest.mark.parametrize("provider", sorted(UNSIGNED_IDS))
def test_a_captured_delivery_resent_with_new_ids_is_a_duplicate(  # type: ignore[no-untyped-def]
        settings, clean_db, provider) -> None:
    """GitHub and Shopify sign the body only: one captured delivery re-sent under new ids
    (its type unchanged) makes no new event or job, and is answered as the original's
    duplicate."""
    from dataclasses import replace

    from webhooks.shared import providers

    signature_header, id_header, type_header = UNSIGNED_IDS[provider]
    secret = "unsigned-ids-secret"
    client = create_app(replace(settings, secrets={provider: (secret,)})).test_client()
    body = json.dumps({"ref": "refs/heads/main", "after": "c0ffee", "n": provider}).encode()
    signature = providers.get(provider).sign(body, secret, 0)[signature_header]  # type: ignore[union-attr]
    answers = [client.post(f"/webhooks/{provider}", data=body, headers={
        signature_header: signature, id_header: f"minted-{n}", type_header: "push",
        "Content-Type": "application/json"}) for n in range(5)]
    assert [a.status_code for a in answers] == [200] * 5
    assert [a.json["duplicate"] for a in answers] == [False, True, True, True, True]
    assert {a.json["event_id"] for a in answers} == {"minted-0"}
    assert _count(clean_db, "webhook_events") == 1 and _count(clean_db, "jobs") == 1
    assert _count(clean_db, "webhook_duplicates") == 4


def test_one_body_under_two_types_is_two_events(settings, clean_db) -> None:  # type: ignore[no-untyped-def]
    """Shopify sends one order as orders/create and orders/paid, byte for byte the same
    body (its SDK's order fixture here): two events, each job run by its own handler. A
    third delivery of that body under a new id and one of the two topics is a duplicate."""
    from dataclasses import replace

    from tests import handlers_for_tests  # noqa: F401 (its orders/* handler)
    from webhooks.shared import providers

    handlers.load(settings)
    secret = "shopify-topics-secret"
    client = create_app(replace(settings, secrets={"shopify": (secret,)})).test_client()
    body = json.dumps(json.loads(factories.provider_fixture("shopify", "order.json"))["order"]
                      ).encode()
    signature = providers.get("shopify").sign(body, secret, 0)["X-Shopify-Hmac-Sha256"]  # type: ignore[union-attr]

    def deliver(webhook_id: str, topic: str):  # type: ignore[no-untyped-def]
        return client.post("/webhooks/shopify", data=body, headers={
            "X-Shopify-Hmac-Sha256": signature, "X-Shopify-Webhook-Id": webhook_id,
            "X-Shopify-Topic": topic, "Content-Type": "application/json"})

    created, paid = deliver("wh-create", "orders/create"), deliver("wh-paid", "orders/paid")
    assert (created.status_code, paid.status_code) == (200, 200)
    assert (created.json["duplicate"], paid.json["duplicate"]) == (False, False)
    assert paid.json["event_id"] == "wh-paid"
    again = deliver("wh-minted", "orders/paid")
    assert again.json["duplicate"] is True and again.json["event_id"] == "wh-paid"
    assert _count(clean_db, "webhook_events") == 2 and _count(clean_db, "jobs") == 2
    jobs.process_batch(clean_db, settings, limit=10)
    with clean_db.connect() as conn:
        outcomes = dict(conn.execute(sa.text(
            "SELECT event_type, outcome FROM jobs WHERE status = 'done'")).all())
    order_id = json.loads(body)["id"]
    assert outcomes == {"orders/create": f"orders/create of order {order_id}",
                        "orders/paid": f"orders/paid of order {order_id}"}


def test_metric_labels_take_only_event_types_a_handler_names(settings, clean_db) -> None:  # type: ignore[no-untyped-def]
    from prometheus_client import REGISTRY

    handlers.load(settings)
    for n in range(3):
        factories.insert_event_and_job(clean_db, {"id": f"gh-{n}", "type": f"minted-{n}"},
                                       provider="github")
    jobs.process_batch(clean_db, settings, limit=10)
    names = {sample.labels.get("event_type") for metric in REGISTRY.collect()
             if metric.name == "webhooks_jobs_done" for sample in metric.samples}
    assert not any(str(name).startswith("minted-") for name in names)
    assert "other" in names
