"""Reconciliation against fake provider APIs over real HTTP (tests/fakes/provider_apis.py,
serving events built from the providers' published fixtures) and the real Postgres:
missing events are recorded once, through the same dedup as a delivery, with the payload
the API served; a second run records nothing; each page is recorded as it is listed, so
an API failure keeps every page before it; 429s are waited out; GitHub fetches only the
guids not recorded."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
import stripe
from sqlalchemy.engine import Engine

from tests.fakes import provider_events
from tests.fakes.provider_apis import GITHUB_TOKEN, HOOK, PADDLE_KEY, STRIPE_KEY, FakeProviderApis
from webhooks.shared import db, reconciliation
from webhooks.shared.errors import MissingVariable
from webhooks.shared.models import ReceivedVia
from webhooks.shared.recording import record_event
from webhooks.shared.settings import Settings

SINCE = datetime.now(UTC) - timedelta(hours=72)


@pytest.fixture()
def fake() -> Iterator[FakeProviderApis]:
    with FakeProviderApis() as running:
        yield running


@pytest.fixture()
def recording(database_url: str, clean_db: Engine) -> Iterator[Engine]:
    """An autocommit engine, as the ingest's and the clock's."""
    settings = Settings.from_env({"DATABASE_URL": database_url})
    engine = db.create_engine(settings, pool_size=4, autocommit=True)
    yield engine
    engine.dispose()


def api_settings(fake: FakeProviderApis, database_url: str) -> Settings:
    return Settings.from_env({
        "DATABASE_URL": database_url, "STRIPE_API_KEY": STRIPE_KEY,
        "STRIPE_API_BASE": fake.url, "PADDLE_API_KEY": PADDLE_KEY, "PADDLE_API_BASE": fake.url,
        "GITHUB_TOKEN": GITHUB_TOKEN, "GITHUB_API_BASE": fake.url, "GITHUB_HOOKS": HOOK,
    })


def stripe_invoice_paid(n: int, created: int) -> dict[str, Any]:
    invoice = provider_events.stripe_object(
        "invoice", id=f"in_{n:05d}", customer=f"cus_{n % 17}", amount_paid=100 + n,
        amount_due=100 + n, status="paid", customer_email=f"buyer{n}@example.com")
    return provider_events.stripe_event("invoice.paid", invoice, event_id=f"evt_{n:05d}",
                                        created=created)


def stripe_events(count: int) -> list[dict[str, Any]]:
    start = int(time.time()) - 3600
    return [stripe_invoice_paid(n, start + n) for n in range(count)]


def serve_stripe(fake: FakeProviderApis, events: list[dict[str, Any]], *,
                 history: bool = True) -> None:
    """The fake serves `events` and, with `history`, one event from before the window (an
    account's usual state: the forward paging's anchor)."""
    older = [stripe_invoice_paid(99_999, int(SINCE.timestamp()) - 3600)] if history else []
    fake.state.stripe_events = events + older


def deliver(engine: Engine, provider: str, event: dict[str, Any], event_id: str,
            event_type: str) -> None:
    record_event(engine, provider, event_id, event_type, json.dumps(event).encode())


def events_in_db(engine: Engine, provider: str) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text(
            "SELECT e.event_id, e.received_via FROM webhook_events e JOIN jobs j "
            "USING (provider, source, event_id) WHERE e.provider = :p"), {"p": provider}).all())


def reconcile(settings: Settings, engine: Engine, provider: str,
              **options: Any) -> reconciliation.Result:
    source = reconciliation.source_for(settings, provider)
    return reconciliation.reconcile(engine, source, provider, SINCE, **options)


def test_stripe_records_what_was_never_delivered_once(fake, recording, database_url) -> None:  # type: ignore[no-untyped-def]
    settings = api_settings(fake, database_url)
    events = stripe_events(250)
    serve_stripe(fake, events)
    for event in events[::3]:  # a third was delivered
        deliver(recording, "stripe", event, event["id"], event["type"])
    woken: list[list[int]] = []
    result = reconcile(settings, recording, "stripe", wake=woken.append)
    assert (result.listed, result.already, result.recorded) == (250, 84, 166)
    assert result.summary() == "listed 250, already recorded 84, recorded 166"
    recorded = events_in_db(recording, "stripe")
    assert len(recorded) == 250
    assert sum(via == ReceivedVia.RECONCILE for via in recorded.values()) == 166
    assert sum(len(batch) for batch in woken) == 166  # every new job woken
    # The payload is the event as Stripe delivers it.
    with recording.connect() as conn:
        payload = conn.execute(sa.text("SELECT payload FROM webhook_events "
                                       "WHERE event_id = 'evt_00001'")).scalar_one()
    assert payload == events[1]
    again = reconcile(settings, recording, "stripe")
    assert (again.listed, again.already, again.recorded) == (250, 250, 0)


def test_dry_run_lists_and_records_nothing(fake, recording, database_url) -> None:  # type: ignore[no-untyped-def]
    serve_stripe(fake, stripe_events(30))
    result = reconcile(api_settings(fake, database_url), recording, "stripe", dry_run=True)
    assert result.recorded == 0 and len(result.would_record) == 30
    assert events_in_db(recording, "stripe") == {}


def test_stripe_payload_is_the_json_the_api_served(fake, recording, database_url) -> None:  # type: ignore[no-untyped-def]
    """Stripe's published objects carry `*_decimal` strings, nested lists and nulls; the
    stripe library turns the decimals into Decimal. What is stored is what was served."""
    created = int(time.time()) - 600
    subscription = provider_events.stripe_object("subscription", id="sub_fixture")
    plan = provider_events.stripe_object("plan")
    guest_refund = provider_events.stripe_object("charge", amount_refunded=40)
    events = [
        stripe_invoice_paid(1, created),
        provider_events.stripe_event("customer.subscription.updated", subscription,
                                     event_id="evt_sub", created=created + 1),
        provider_events.stripe_event("plan.created", plan, event_id="evt_plan",
                                     created=created + 2),
        provider_events.stripe_event("charge.refunded", guest_refund, event_id="evt_guest",
                                     created=created + 3),
    ]
    serve_stripe(fake, events)
    client = stripe.StripeClient(STRIPE_KEY, base_addresses={"api": fake.url})
    listed = client.v1.events.list(params={"limit": 10})
    # The official client reads the fake as it reads Stripe, decimals included ...
    invoice = next(event for event in listed.data if event.id == "evt_00001").data.object
    assert invoice.lines.data[0].pricing.unit_amount_decimal == Decimal("101")
    assert isinstance(invoice.lines.data[0].pricing.unit_amount_decimal, Decimal)

    result = reconcile(api_settings(fake, database_url), recording, "stripe")
    assert result.recorded == 4
    with recording.connect() as conn:
        stored = dict(conn.execute(sa.text(
            "SELECT event_id, payload FROM webhook_events WHERE provider = 'stripe'")).all())
        as_text = conn.execute(sa.text(
            "SELECT payload::text FROM webhook_events WHERE event_id = 'evt_sub'")).scalar_one()
    # ... and what was stored is what was served, field for field.
    for event in events:
        assert stored[event["id"]] == event
    line = stored["evt_00001"]["data"]["object"]["lines"]["data"][0]
    assert line["pricing"]["unit_amount_decimal"] == "101" and line["quantity_decimal"] == "1"
    assert line["taxes"] is None and line["discounts"] == []
    item_price = stored["evt_sub"]["data"]["object"]["items"]["data"][0]["price"]
    assert item_price["unit_amount_decimal"] == "2000" and item_price["unit_amount"] == 2000
    assert '"unit_amount_decimal": "2000"' in as_text
    assert stored["evt_plan"]["data"]["object"]["amount_decimal"] == "2000"
    assert stored["evt_guest"]["data"]["object"]["customer"] is None


def test_stripe_pages_forward_in_time_from_the_window_start(fake, recording,  # type: ignore[no-untyped-def]
                                                            database_url) -> None:
    events = stripe_events(250)
    serve_stripe(fake, events)
    reconcile(api_settings(fake, database_url), recording, "stripe")
    with recording.connect() as conn:
        order = conn.execute(sa.text("SELECT event_id FROM jobs ORDER BY id")).scalars().all()
    assert order == [event["id"] for event in events]  # oldest first, across pages
    assert fake.state.requests["/v1/events"] == 1 + 3  # the anchor, then three pages


# case -> (events in the window, successful requests before page 2's, page 1's events in
# the window). Stripe: the anchor request, then page 1; Paddle's page 1 starts with the 30
# events older than the window; GitHub: the list, then the details of page 1's deliveries.
PAGES_OF_THREE = {"stripe": (250, 2, 100), "stripe-no-older-event": (250, 2, 100),
                  "paddle": (450, 1, 200 - 30), "github": (250, 1 + 100, 100)}


@pytest.mark.parametrize("case", sorted(PAGES_OF_THREE))
def test_a_500_on_page_two_keeps_page_one_and_the_next_run_records_the_rest(  # type: ignore[no-untyped-def]
        fake, recording, database_url, case) -> None:
    provider = case.split("-")[0]
    count, before_page_two, page = PAGES_OF_THREE[case]
    settings = api_settings(fake, database_url)
    newest_first = _serve(fake, case, count)
    fake.state.fail_after = before_page_two  # page 2 answers 500 (after the retries)
    with pytest.raises(reconciliation.ReconcileFailed) as failure:
        reconcile(settings, recording, provider)
    kept = failure.value.result  # type: ignore[attr-defined]
    assert (kept.listed, kept.recorded) == (page, page)
    recorded = set(events_in_db(recording, provider))
    ids = _served_ids(fake, provider)  # oldest first
    assert recorded == set(ids[-page:] if newest_first else ids[:page])
    fake.state.fail_after = None
    result = reconcile(settings, recording, provider)
    assert (result.listed, result.already, result.recorded) == (count, page, count - page)
    assert set(events_in_db(recording, provider)) == set(ids)


def _serve(fake: FakeProviderApis, case: str, count: int) -> bool:
    """Serve `count` events in the window (and some older); True if the provider's list
    comes newest first."""
    if case == "stripe":
        serve_stripe(fake, stripe_events(count))
    elif case == "stripe-no-older-event":  # nothing to page forward from: newest first
        serve_stripe(fake, stripe_events(count), history=False)
        return True
    elif case == "paddle":
        older = [provider_events.paddle_event(n, SINCE - timedelta(days=1, seconds=-n),
                                              event_id=f"evt_00h{n:08d}") for n in range(30)]
        fake.state.paddle_events = older + [_paddle_event(n) for n in range(count)]
    else:
        older = [provider_events.github_delivery(
            n + 1, str(uuid.UUID(int=n + 1)), SINCE - timedelta(days=1, seconds=-n),
            payload=provider_events.github_push(f"{n + 1:040x}")) for n in range(30)]
        fake.state.github_deliveries = older + [_github_delivery(n + 30) for n in range(count)]
        return True
    return False


def _served_ids(fake: FakeProviderApis, provider: str) -> list[str]:
    """The ids of the events within the window, oldest first."""
    cutoff = SINCE.timestamp()
    if provider == "stripe":
        return [e["id"] for e in sorted(fake.state.stripe_events, key=lambda e: e["created"])
                if e["created"] >= cutoff]
    if provider == "paddle":
        return [e["event_id"] for e in sorted(fake.state.paddle_events,
                                              key=lambda e: e["event_id"])
                if datetime.fromisoformat(e["occurred_at"]).timestamp() >= cutoff]
    return [d["guid"] for d in sorted(fake.state.github_deliveries, key=lambda d: d["id"])
            if datetime.fromisoformat(d["delivered_at"]).timestamp() >= cutoff]


def test_failure_while_fetching_keeps_what_was_recorded(fake, recording, database_url) -> None:  # type: ignore[no-untyped-def]
    settings = api_settings(fake, database_url)
    fake.state.github_deliveries = [_github_delivery(n) for n in range(40)]
    fake.state.fail_after = 1 + 10  # the list, then ten deliveries' details
    with pytest.raises(reconciliation.ReconcileFailed) as failure:
        reconcile(settings, recording, "github")
    kept = failure.value.result.recorded  # type: ignore[attr-defined]
    assert kept == 10 and len(events_in_db(recording, "github")) == 10
    fake.state.fail_after = None
    result = reconcile(settings, recording, "github")
    assert (result.already, result.recorded) == (10, 30)
    assert len(events_in_db(recording, "github")) == 40


def test_rate_limit_is_waited_out(fake, recording, database_url) -> None:  # type: ignore[no-untyped-def]
    settings = api_settings(fake, database_url)
    serve_stripe(fake, stripe_events(5))
    fake.state.paddle_events = [_paddle_event(n) for n in range(5)]
    for provider in ("stripe", "paddle"):
        fake.state.rate_limited = 1
        started = time.monotonic()
        result = reconcile(settings, recording, provider)
        assert result.recorded == 5
        assert time.monotonic() - started >= 0.9  # Retry-After: 1 was honoured


def test_github_redeliveries_share_a_guid_and_only_unrecorded_are_fetched(  # type: ignore[no-untyped-def]
        fake, recording, database_url) -> None:
    settings = api_settings(fake, database_url)
    deliveries = [_github_delivery(n) for n in range(150)]
    redeliveries = [{**d, "id": 10_000 + d["id"], "redelivery": True} for d in deliveries[:20]]
    fake.state.github_deliveries = deliveries + redeliveries
    for d in deliveries[100:]:  # 50 were delivered
        deliver(recording, "github", d["request"]["payload"], d["guid"], d["event"])
    result = reconcile(settings, recording, "github")
    assert (result.listed, result.already, result.recorded) == (150, 50, 100)
    fetched = fake.state.detail_fetches
    assert sum(fetched.values()) == 100
    assert not any(fetched[d["id"]] for d in deliveries[100:])
    with recording.connect() as conn:
        row = conn.execute(sa.text("SELECT event_type, payload FROM webhook_events "
                                   "WHERE event_id = :g"), {"g": deliveries[0]["guid"]}).one()
    assert row.event_type == "push" and row.payload == deliveries[0]["request"]["payload"]


def test_a_delivery_and_a_reconciliation_at_once_make_one_event(fake, recording,  # type: ignore[no-untyped-def]
                                                                 database_url) -> None:
    settings = api_settings(fake, database_url)
    events = stripe_events(300)
    serve_stripe(fake, events)
    barrier = threading.Barrier(3)

    def deliveries() -> None:
        barrier.wait()
        for event in events:
            deliver(recording, "stripe", event, event["id"], event["type"])

    def reconciliations() -> None:
        barrier.wait()
        reconcile(settings, recording, "stripe")

    threads = [threading.Thread(target=deliveries), threading.Thread(target=reconciliations),
               threading.Thread(target=reconciliations)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    with recording.connect() as conn:
        counts = conn.execute(sa.text(
            "SELECT (SELECT count(*) FROM webhook_events), (SELECT count(*) FROM jobs), "
            "(SELECT count(DISTINCT event_id) FROM jobs)")).one()
    assert tuple(counts) == (300, 300, 300)


def test_without_credentials_the_provider_is_not_configured(database_url) -> None:  # type: ignore[no-untyped-def]
    settings = Settings.from_env({"DATABASE_URL": database_url})
    assert reconciliation.configured(settings) == []
    with pytest.raises(MissingVariable, match="STRIPE_API_KEY"):
        reconciliation.source_for(settings, "stripe")


def test_the_clock_resumes_from_its_last_success(fake, recording, database_url) -> None:  # type: ignore[no-untyped-def]
    assert reconciliation.since_for_clock(recording, "stripe") < datetime.now(UTC) - timedelta(
        hours=71)
    result = reconciliation.Result("stripe", SINCE, listed=3)
    reconciliation.record_run(recording, result)
    resumed = reconciliation.since_for_clock(recording, "stripe")
    assert datetime.now(UTC) - timedelta(minutes=20) < resumed < datetime.now(UTC)
    reconciliation.record_run(recording, reconciliation.Result("stripe", SINCE, error="boom"))
    # A failed run does not move the start: the next run starts from the last success.
    assert abs(reconciliation.since_for_clock(recording, "stripe") - resumed) < timedelta(
        seconds=60)


def _paddle_event(n: int) -> dict[str, Any]:
    occurred = datetime.now(UTC) - timedelta(hours=1, seconds=-n)
    return provider_events.paddle_event(n, occurred, event_id=f"evt_01h{n:08d}")


def _github_delivery(n: int) -> dict[str, Any]:
    delivered = datetime.now(UTC) - timedelta(hours=2, seconds=-n)
    return provider_events.github_delivery(n + 1, str(uuid.UUID(int=n + 1)), delivered,
                                           payload=provider_events.github_push(f"{n:040x}"))


def test_web_metrics_show_reconciliation_from_the_database(fake, recording, database_url,  # type: ignore[no-untyped-def]
                                                           settings) -> None:
    from webhooks.ingest.app import create_app

    serve_stripe(fake, stripe_events(4))
    deliver(recording, "stripe", fake.state.stripe_events[0], "evt_00000", "invoice.paid")
    reconciliation.since_for_clock(recording, "stripe")
    result = reconcile(api_settings(fake, database_url), recording, "stripe")
    reconciliation.record_run(recording, result)
    reconciliation.since_for_clock(recording, "stripe")
    reconciliation.record_run(recording, reconciliation.Result("stripe", SINCE, error="500"))
    text = create_app(settings).test_client().get("/metrics").get_data(as_text=True)
    assert 'webhooks_reconciled_events{provider="stripe"} 3.0' in text
    assert 'webhooks_reconcile_runs{provider="stripe"} 2.0' in text
    assert 'webhooks_reconcile_failures{provider="stripe"} 1.0' in text
    assert 'webhooks_reconcile_last_success_timestamp_seconds{provider="stripe"}' in text


def _notifications(engine: Engine) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(
            "SELECT kind, provider, source, count FROM notifications ORDER BY created_at"))]


def test_the_reconcile_command(fake, recording, database_url, settings) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from webhooks.cli import main

    serve_stripe(fake, stripe_events(12))
    deliver(recording, "stripe", fake.state.stripe_events[0], "evt_00000", "invoice.paid")
    env = {"DATABASE_URL": database_url, "BROKER_URL": settings.broker_url,
           "STRIPE_API_KEY": STRIPE_KEY, "STRIPE_API_BASE": fake.url}
    runner = CliRunner()
    missing = runner.invoke(main, ["reconcile", "stripe"], env={**env, "STRIPE_API_KEY": ""})
    assert missing.exit_code == 1 and "STRIPE_API_KEY" in missing.output
    dry = runner.invoke(main, ["reconcile", "stripe", "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    assert dry.output.count("would record evt_") == 11
    assert dry.output.splitlines()[-1] == "listed 12, already recorded 1, recorded 0"
    assert _notifications(recording) == []  # a dry run records nothing, no notification
    real = runner.invoke(main, ["reconcile", "stripe", "--since", "2h"], env=env)
    assert real.exit_code == 0 and real.output == "listed 12, already recorded 1, recorded 11\n"
    # The command's run is told as the clock's are: one reconcile.found with its count.
    assert _notifications(recording) == [("reconcile.found", "stripe", "stripe", 11)]
    again = runner.invoke(main, ["reconcile", "stripe", "--since", "2h"], env=env)
    assert again.output == "listed 12, already recorded 12, recorded 0\n"
    assert len(_notifications(recording)) == 1  # nothing found, nothing told
    fake.state.fail_after = 0
    failed = runner.invoke(main, ["reconcile", "stripe"], env=env)
    assert failed.exit_code == 1 and "Stripe" in failed.output
    assert runner.invoke(main, ["reconcile", "shopify"], env=env).exit_code == 2


def test_an_event_postgres_cannot_store_is_named_skipped_and_the_run_recorded(  # type: ignore[no-untyped-def]
        fake, recording, database_url) -> None:
    """A \\u0000 in an older event: the run records the events after it, fails naming it,
    and the clock records the failed run (the failing-reconciliation alert can fire)."""
    from webhooks.clock import schedule

    settings = api_settings(fake, database_url)
    poison = _paddle_event(0)
    poison["data"]["custom_data"] = {"note": "a\u0000b"}
    fake.state.paddle_events = [poison, _paddle_event(1), _paddle_event(2)]
    with pytest.raises(reconciliation.ReconcileFailed, match=poison["event_id"]) as failure:
        reconcile(settings, recording, "paddle")
    assert failure.value.result.recorded == 2  # type: ignore[attr-defined]
    assert set(events_in_db(recording, "paddle")) == {"evt_01h00000001", "evt_01h00000002"}
    result = schedule.reconcile(settings, recording, _NoBroker(), "paddle")
    assert result.error and poison["event_id"] in result.error and result.already == 2
    with recording.connect() as conn:
        run = conn.execute(sa.text("SELECT runs, failures, last_error FROM reconcile_runs "
                                   "WHERE provider = 'paddle'")).one()
    assert (run.runs, run.failures) == (1, 1) and poison["event_id"] in run.last_error


OSC = "\x1b]0;pwned\x07"  # sets a terminal's title; others make links or write files


def test_the_reconcile_commands_failure_lines_escape_what_the_api_sent(  # type: ignore[no-untyped-def]
        fake, recording, database_url, settings) -> None:
    """An API's error body and a listed event's id are the API's text: the line that
    `webhooks reconcile` prints on failure shows their control characters escaped
    (shared/terminal.py `visible`), never raw."""
    from click.testing import CliRunner

    from webhooks.cli import main

    env = {"DATABASE_URL": database_url, "BROKER_URL": settings.broker_url,
           "PADDLE_API_KEY": PADDLE_KEY, "PADDLE_API_BASE": fake.url}
    runner = CliRunner()
    fake.state.refuse_body = f"{OSC}Paddle says: all good\x9b2J"
    refused = runner.invoke(main, ["reconcile", "paddle"], env=env)
    assert refused.exit_code == 1
    assert "\x1b" not in refused.output and "\x07" not in refused.output
    assert "\x9b" not in refused.output
    assert "HTTP 400: \\x1b]0;pwned\\x07Paddle says: all good\\x9b2J" in refused.output
    fake.state.refuse_body = None
    poison = _paddle_event(0)
    poison["event_id"] = f"evt_{OSC}RED"
    poison["data"]["custom_data"] = {"note": "a\u0000b"}
    fake.state.paddle_events = [poison, _paddle_event(1)]
    skipped = runner.invoke(main, ["reconcile", "paddle"], env=env)
    assert skipped.exit_code == 1
    assert "\x1b" not in skipped.output and "\x07" not in skipped.output
    assert "skipped, they cannot be stored: evt_\\x1b]0;pwned\\x07RED (" in skipped.output


@pytest.mark.parametrize("provider", ["paddle", "github"])
def test_a_pagination_link_to_another_host_gets_no_credentials(  # type: ignore[no-untyped-def]
        fake, recording, database_url, provider) -> None:
    settings = api_settings(fake, database_url)
    fake.state.paddle_events = [_paddle_event(n) for n in range(250)]
    fake.state.github_deliveries = [_github_delivery(n) for n in range(150)]
    with FakeProviderApis() as elsewhere:
        fake.state.next_base = elsewhere.url
        with pytest.raises(reconciliation.ReconcileFailed, match="refused") as failure:
            reconcile(settings, recording, provider)
        assert sum(elsewhere.state.requests.values()) == 0
    assert failure.value.result.recorded > 0  # type: ignore[attr-defined]  # page 1 kept


class _NoBroker:
    """schedule.reconcile's broker: nothing is recorded here, so nothing is woken."""
