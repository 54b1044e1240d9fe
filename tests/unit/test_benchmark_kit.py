"""The kit benchmark's events (benchmarks/kit.py): as many as asked, each id its own, an
object's events together, built from the examples' payloads."""

from __future__ import annotations

from collections import Counter

from benchmarks import kit


def test_the_reference_apps_events_are_distinct_and_of_each_type() -> None:
    events = kit.ledger_events(kit.EVENTS)
    assert len(events) == kit.EVENTS == len({event.event_id for event in events})
    assert Counter(event.event_type for event in events) == {
        "invoice.paid": 13, "invoice.payment_succeeded": 13, "charge.refunded": 12,
        "customer.subscription.created": 6, "customer.subscription.updated": 6}
    assert all(event.payload["id"] == event.event_id for event in events)
    paid, succeeded = events[:2]
    assert paid.payload["data"] == succeeded.payload["data"]  # one invoice, both event types
    created, updated = events[6:8]
    assert created.payload["data"]["object"]["id"] == updated.payload["data"]["object"]["id"]
    assert created.payload["created"] < updated.payload["created"]
    assert len({event.payload["data"]["object"]["customer"] for event in events}) == \
        kit.CUSTOMERS


def test_the_example_apps_events_are_invoice_pairs() -> None:
    events = kit.acme_events(4)
    assert [event.event_type for event in events] == [
        "invoice.paid", "invoice.payment_succeeded"] * 2
    assert len({event.payload["data"]["object"]["id"] for event in events}) == 2
    assert len({event.event_id for event in events}) == 4
