"""Guarantee 10 (docs/guarantees.md) through the real processes: one logical event is
applied once whichever sources and kinds of events carry it, and a delivery signed for
one source is refused at another.

The system runs as the Procfile runs it (web, two workers, clock) with three Stripe
sources: the platform's default source (`/webhooks/stripe`), a live-only Connect endpoint
(`/webhooks/stripe/connect`) and a thin-event destination (`/webhooks/stripe/thin`), whose
jobs fetch from the fake Stripe API (tests/fakes/provider_apis.py, Stripe's published
objects) on loopback as STRIPE_API_BASE. Deliveries come from separate sender processes,
signed as Stripe documents it (tests/acceptance/signing.py); receipts go to the fake
Postmark. Every test ends with `webhooks audit` exiting 0.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import requests

from tests.acceptance import checks, senders
from tests.acceptance.harness import System, wait_for
from tests.acceptance.signing import SECRETS, signature_headers
from tests.acceptance.world import Event
from tests.fakes import provider_events
from tests.fakes.provider_apis import STRIPE_KEY, FakeProviderApis

CONNECT_SECRET = "whsec_acceptance_connect"
THIN_SECRET = "whsec_acceptance_thin"
SOURCE_SECRETS = {None: SECRETS["stripe"], "connect": CONNECT_SECRET, "thin": THIN_SECRET}
COPIES = 12  # concurrent deliveries of one event, from as many processes


@pytest.fixture(scope="module")
def stripe_api() -> Iterator[FakeProviderApis]:
    with FakeProviderApis() as fake:
        yield fake


@pytest.fixture(scope="module")
def sourced_system(tmp_path_factory: pytest.TempPathFactory,
                   stripe_api: FakeProviderApis) -> Iterator[System]:
    """The Procfile's processes with the three sources. The clock's periodic
    reconciliation is off (RECONCILE_INTERVAL_SECONDS=0), so that every request to the
    fake API is a job's fetch and the faults below reach the jobs."""
    running = System(
        tmp_path_factory.mktemp("acceptance-sources"),
        STRIPE_SOURCES="connect,thin", STRIPE_CONNECT_WEBHOOK_SECRET=CONNECT_SECRET,
        STRIPE_CONNECT_CONNECT="1", STRIPE_CONNECT_LIVEMODE="live",
        STRIPE_THIN_WEBHOOK_SECRET=THIN_SECRET, STRIPE_THIN_EVENTS="thin",
        STRIPE_THIN_API_KEY=STRIPE_KEY, STRIPE_API_BASE=stripe_api.url,
        RECONCILE_INTERVAL_SECONDS="0")
    try:
        yield running.start()
    finally:
        running.stop()


@pytest.fixture()
def system(sourced_system: System, stripe_api: FakeProviderApis) -> Iterator[System]:
    """This module's system (in place of conftest's), healed and emptied; after each test,
    `webhooks audit` must exit 0 on what it left."""
    sourced_system.heal()
    sourced_system.reset()
    stripe_api.state.fail_after = None
    yield sourced_system
    audited = checks.audit(sourced_system)
    assert audited.returncode == 0, audited.stdout[-3000:] + audited.stderr[-2000:]


# --- the events ---------------------------------------------------------------------------


def paid_invoice(invoice_id: str, customer: str, amount: int) -> dict[str, Any]:
    """Stripe's published invoice, paid."""
    return provider_events.stripe_object(
        "invoice", id=invoice_id, customer=customer, amount_paid=amount, currency="eur",
        status="paid", customer_email=f"{customer}@example.com")


def snapshot(invoice: dict[str, Any], event_id: str, *, source: str | None = None,
             account: str | None = None, livemode: bool = True) -> Event:
    """A snapshot invoice.paid, delivered to `source` (None: the platform's)."""
    body = provider_events.stripe_event("invoice.paid", invoice, event_id=event_id,
                                        created=int(time.time()))
    body.update({"livemode": livemode, "account": account})
    return Event("stripe", event_id, "invoice.paid", json.dumps(body).encode(), source,
                 SOURCE_SECRETS[source])


def thin(api: FakeProviderApis, invoice: dict[str, Any], event_id: str) -> Event:
    """A thin v1.invoice.paid for the thin destination; the fake serves the full event and
    the invoice it names."""
    full = provider_events.stripe_thin_event("v1.invoice.paid", invoice, event_id=event_id,
                                             created=datetime.now(UTC))
    api.serve_stripe_v2(full, invoice)
    body = json.dumps(provider_events.thin_payload(full)).encode()
    return Event("stripe", event_id, "v1.invoice.paid", body, "thin", THIN_SECRET)


def at_once(events: list[Event], first_index: int = 0) -> list[list[senders.Planned]]:
    """One plan per event, each a process of its own, all sent at the same instant."""
    return [[(first_index + n, event, 0.5)] for n, event in enumerate(events)]


def post(system: System, event: Event, secret: str) -> int:
    headers = {"Content-Type": "application/json",
               **signature_headers("stripe", event.body, secret)}
    return requests.post(f"{system.base_url}{event.path}", data=event.body, headers=headers,
                         timeout=10).status_code


def credits(system: System) -> list[tuple[str, int]]:
    return [(r.customer_id, int(r.amount)) for r in system.rows(
        "SELECT customer_id, amount FROM ledger_entries ORDER BY id")]


def receipts(system: System) -> dict[str, int]:
    by_key: dict[str, int] = system.postmark_messages()["by_key"]
    return by_key


def settle_and_send_emails(system: System) -> None:
    system.settle()
    wait_for(lambda: not system.rows("SELECT 1 FROM outbox WHERE status <> 'sent'"), 60,
             "every email sent")


# --- the scenarios ------------------------------------------------------------------------


def test_each_source_verifies_only_its_own_signature(system: System,
                                                     stripe_api: FakeProviderApis) -> None:
    platform = snapshot(paid_invoice("in_acc_own", "cus_own", 1100), "evt_acc_own")
    connect = snapshot(paid_invoice("in_acc_conn", "cus_conn", 1200), "evt_acc_conn",
                       source="connect", account="acct_accept1")
    destination = thin(stripe_api, paid_invoice("in_acc_thin", "cus_thin", 1300),
                       "evt_acc_thin")
    for event in (platform, connect, destination):
        for source, secret in SOURCE_SECRETS.items():
            if source != event.source:
                assert post(system, event, secret) == 400, (event.path, source)
    assert system.scalar("SELECT count(*) FROM webhook_events") == 0
    for event in (platform, connect, destination):
        assert post(system, event, SOURCE_SECRETS[event.source]) == 200, event.path
    settle_and_send_emails(system)
    recorded = system.rows("SELECT event_id, source, account FROM webhook_events "
                           "ORDER BY event_id")
    assert [tuple(r) for r in recorded] == [("evt_acc_conn", "connect", "acct_accept1"),
                                            ("evt_acc_own", "stripe", None),
                                            ("evt_acc_thin", "thin", None)]
    assert sorted(credits(system)) == [("cus_conn", 1200), ("cus_own", 1100),
                                       ("cus_thin", 1300)]


def test_one_event_at_the_platform_and_connect_urls_at_once_is_one_row_one_job_one_credit(
        system: System) -> None:
    invoice = paid_invoice("in_acc_both", "cus_both", 4200)
    platform = snapshot(invoice, "evt_acc_both", account="acct_accept2")
    connect = snapshot(invoice, "evt_acc_both", source="connect", account="acct_accept2")
    answers = senders.send(system.base_url, at_once([platform, connect] * (COPIES // 2)))
    settle_and_send_emails(system)

    assert checks.statuses(answers) == {200: COPIES}
    assert sum(answer.duplicate is False for answer in answers) == 1
    assert system.scalar("SELECT count(*) FROM webhook_events") == 1
    assert [tuple(r) for r in system.rows("SELECT event_id, status FROM jobs")] == [
        ("evt_acc_both", "done")]
    assert system.scalar("SELECT count(*) FROM webhook_duplicates") == COPIES - 1
    carriers = {r.source for r in system.rows(
        "SELECT source FROM webhook_events UNION SELECT source FROM webhook_duplicates")}
    assert carriers == {"stripe", "connect"}
    assert credits(system) == [("cus_both", 4200)]
    assert receipts(system) == {"receipt:in_acc_both": 1}


def test_a_connect_test_mode_event_on_the_live_only_source_is_recorded_with_no_effect(
        system: System) -> None:
    test_mode = snapshot(paid_invoice("in_acc_test", "cus_testmode", 900), "evt_acc_test",
                         source="connect", account="acct_accept3", livemode=False)
    live = snapshot(paid_invoice("in_acc_live", "cus_live", 901), "evt_acc_live",
                    source="connect", account="acct_accept3")
    answers = senders.send(system.base_url, at_once([test_mode, live]))
    settle_and_send_emails(system)

    assert checks.statuses(answers) == {200: 2}
    jobs = {r.event_id: (r.status, r.outcome) for r in system.rows(
        "SELECT event_id, status, outcome FROM jobs")}
    assert jobs["evt_acc_test"][0] == "done"
    assert "livemode false refused" in jobs["evt_acc_test"][1]
    assert system.rows("SELECT livemode FROM webhook_events WHERE event_id = 'evt_acc_test'"
                       )[0].livemode is False
    assert credits(system) == [("cus_live", 901)]
    assert receipts(system) == {"receipt:in_acc_live": 1}


def test_a_thin_and_a_snapshot_carrier_of_one_invoice_at_once_credit_and_receipt_once(
        system: System, stripe_api: FakeProviderApis) -> None:
    """During a migration to an event destination, both endpoints carry each payment: two
    event ids, two rows, two jobs, one credit, one receipt, in whichever order they run."""
    plans: list[list[senders.Planned]] = []
    invoices = [paid_invoice(f"in_acc_mig{n}", f"cus_mig{n}", 1000 + n) for n in range(4)]
    for n, invoice in enumerate(invoices):
        pair = [snapshot(invoice, f"evt_acc_snap{n}"), thin(stripe_api, invoice,
                                                             f"evt_acc_thin{n}")]
        plans += [[(2 * n + k, event, 0.5 + 0.3 * n)] for k, event in enumerate(pair)]
    answers = senders.send(system.base_url, plans)
    settle_and_send_emails(system)

    assert checks.statuses(answers) == {200: len(plans)}
    assert system.scalar("SELECT count(*) FROM jobs WHERE status = 'done'") == len(plans)
    assert sorted(credits(system)) == [(f"cus_mig{n}", 1000 + n) for n in range(4)]
    assert receipts(system) == {f"receipt:in_acc_mig{n}": 1 for n in range(4)}
    fetched = stripe_api.state.requests
    assert all(fetched[f"/v2/core/events/evt_acc_thin{n}"] >= 1 for n in range(4))


def test_a_thin_event_whose_fetches_fail_is_retried_and_credited_once(
        system: System, stripe_api: FakeProviderApis) -> None:
    """The fake API answers 500 to every request until the job has failed twice: the job
    is retried by its backoff, applies nothing meanwhile, and credits once when Stripe
    answers again."""
    event = thin(stripe_api, paid_invoice("in_acc_flaky", "cus_flaky", 777), "evt_acc_flaky")
    stripe_api.state.fail_after = 0
    try:
        answers = senders.send(system.base_url, at_once([event] * 3))
        assert checks.statuses(answers) == {200: 3}
        wait_for(lambda: system.scalar(
            "SELECT attempts FROM jobs WHERE event_id = 'evt_acc_flaky'") >= 2, 60,
            "two failed attempts")
        job = system.rows("SELECT status, last_error FROM jobs")[0]
        assert job.status == "pending" and "APIError" in job.last_error
        assert credits(system) == []
    finally:
        stripe_api.state.fail_after = None
    settle_and_send_emails(system)
    job = system.rows("SELECT status, attempts FROM jobs")[0]
    assert job.status == "done" and job.attempts >= 3
    assert credits(system) == [("cus_flaky", 777)]
    assert receipts(system) == {"receipt:in_acc_flaky": 1}
