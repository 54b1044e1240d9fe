"""Stripe Connect and per-source reconciliation, against the real Postgres and the fake
Stripe API over real HTTP (tests/fakes/provider_apis.py, driven through the `stripe`
library as production drives it): the livemode policy before any effect (a test-mode
event of a connected account on a live-only source is recorded and done, never
credited); a Connect source reconciled across its connected accounts (those its events
name and those `GET /v1/accounts` lists) within the process's one request budget while
the fake answers 429 above Stripe's rate; a thin source through `GET /v2/core/events`; two
sources of one provider each with its own key; the after-failover run per source; and
`webhooks reconcile stripe/connect`."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories
from tests.conftest import STRIPE_SECRET
from tests.fakes import provider_events
from tests.fakes.provider_apis import STRIPE_KEY, FakeProviderApis
from tests.integration.test_failover import stage_failover
from webhooks.clock import schedule
from webhooks.ingest.app import create_app
from webhooks.shared import audit, db, handlers, reconciliation
from webhooks.shared.providers import stripe_budget
from webhooks.shared.providers import stripe_events as stripe_reconciliation
from webhooks.shared.settings import Settings
from webhooks.worker import jobs

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
    with caplog.at_level(logging.DEBUG, logger="webhooks.worker.jobs"):
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
    # The refused event's job is done with no effect by design: the audit holds.
    assert audit.audit(clean_db).violations == []
    # Delivered again, the live event is a duplicate: still credited once.
    deliver_connect(client, "evt_live_mode", livemode=True)
    jobs.process_batch(clean_db, live_connect)
    assert rows(clean_db, "SELECT count(*) FROM ledger_entries") == [(1,)]


# --- reconciliation per source --------------------------------------------------------

NOW = int(datetime.now(UTC).timestamp())
EU_KEY = "sk_test_second_account"


@pytest.fixture()
def fake() -> Iterator[FakeProviderApis]:
    with FakeProviderApis() as running:
        yield running


class NoBroker:
    """The clock's broker: the wake-ups are not what these tests look at."""

    def enqueue(self, *_: object, **__: object) -> None:
        pass


def sourced(settings: Settings, database_url: str, fake: FakeProviderApis,
            **env: str) -> Settings:
    return Settings.from_env({
        "DATABASE_URL": database_url, "BROKER_URL": settings.broker_url or "",
        "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "STRIPE_API_BASE": fake.url,
        "WEBHOOKS_DATA_DIR": str(settings.data_dir), **env})


def connect_env(**more: str) -> dict[str, str]:
    return {"STRIPE_SOURCES": "connect", "STRIPE_CONNECT_WEBHOOK_SECRET": CONNECT_SECRET,
            "STRIPE_CONNECT_CONNECT": "1", "STRIPE_CONNECT_API_KEY": STRIPE_KEY, **more}


def account_events(account: str, count: int, *, start: int = NOW - 3600) -> list[dict[str, Any]]:
    """A connected account's events as Stripe lists them with its Stripe-Account: its
    `account` set; the first one is older than the window (the forward paging's anchor)."""
    events = []
    for n in range(count + 1):
        paid = provider_events.stripe_object("invoice", id=f"in_{account}_{n}", status="paid",
                                             amount_paid=100 + n, customer=f"cus_{account}")
        event = provider_events.stripe_event(
            "invoice.paid", paid, event_id=f"evt_{account}_{n}",
            created=start - 80 * 3600 if n == 0 else start + n)
        events.append({**event, "account": account, "livemode": True})
    return events


def recorded(engine: Engine) -> list[tuple[Any, ...]]:
    return rows(engine, "SELECT event_id, source, account, received_via FROM webhook_events "
                "ORDER BY event_id")


def max_per_second(times: list[float]) -> int:
    """The most requests the fake saw in any one second."""
    ordered = sorted(times)
    return max((sum(1 for t in ordered[i:] if t < at + 1.0) for i, at in enumerate(ordered)),
               default=0)


def test_a_connect_source_reconciles_each_account_within_the_budget_under_a_429_limit(
        clean_db: Engine, settings: Settings, database_url: str, fake: FakeProviderApis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stripe_reconciliation, "PAGE", 2)  # many requests per account
    api = sourced(settings, database_url, fake, **connect_env())
    per_account = {acct: account_events(acct, 60) for acct in ("acct_A", "acct_B", "acct_C")}
    fake.state.stripe_account_events = per_account
    # Only acct_C is listed by GET /v1/accounts alone; acct_A and acct_B are named by
    # the Connect source's recorded events (one each, delivered).
    fake.state.stripe_accounts = [provider_events.stripe_account("acct_C", NOW - 10)]
    client = create_app(api).test_client()
    for acct in ("acct_A", "acct_B"):
        body = json.dumps(per_account[acct][1]).encode()
        assert client.post("/webhooks/stripe/connect", data=body, headers={
            "Stripe-Signature": factories.stripe_signature(body, CONNECT_SECRET)}
        ).status_code == 200
    # The platform's own events are not the Connect source's.
    fake.state.stripe_events = account_events("platform", 3)
    fake.state.stripe_rate = int(stripe_budget.REQUESTS_PER_SECOND)
    engine = db.create_engine(api, pool_size=1, autocommit=True)
    try:
        [connect] = [s for s in reconciliation.configured(api) if s.name == "connect"]
        result = schedule.reconcile(api, engine, NoBroker(), connect)  # type: ignore[arg-type]
    finally:
        engine.dispose()
    assert result.error is None, result.error
    assert (result.listed, result.already, result.recorded) == (180, 2, 178)
    delivered = {per_account["acct_A"][1]["id"], per_account["acct_B"][1]["id"]}
    want = sorted((e["id"], "connect", acct, "delivery" if e["id"] in delivered else "reconcile")
                  for acct, events in per_account.items() for e in events[1:])
    assert recorded(clean_db) == want
    listed_for = {account for path, _, account in fake.state.stripe_auth
                  if path == "/v1/events"}
    assert listed_for == {"acct_A", "acct_B", "acct_C"}  # never the platform's own list
    # Within the budget, the fake's limit is not reached but for the jitter of arrivals (a
    # request or two landing closer than they were sent); without it, a run of this many
    # requests is answered 429 each time it outruns the limit.
    seen = max_per_second(fake.state.stripe_times)
    assert seen <= stripe_budget.REQUESTS_PER_SECOND + stripe_budget.BURST, seen
    assert fake.state.stripe_429s <= 1, fake.state.stripe_429s
    assert rows(clean_db, "SELECT provider, source, last_error FROM reconcile_runs") == [
        ("stripe", "connect", None)]


def platform_events(prefix: str, count: int) -> list[dict[str, Any]]:
    """An account's own events (no `account`), the first older than the window."""
    events = account_events(prefix, count)
    for event in events:
        del event["account"]
    return events


def run_clock(api: Settings) -> list[reconciliation.Result]:
    """The clock's periodic run of every configured source, one after another."""
    engine = db.create_engine(api, pool_size=1, autocommit=True)
    try:
        return [schedule.reconcile(api, engine, NoBroker(), source)  # type: ignore[arg-type]
                for source in reconciliation.configured(api)]
    finally:
        engine.dispose()


def test_a_thin_source_is_reconciled_through_the_v2_event_list(
        clean_db: Engine, settings: Settings, database_url: str,
        fake: FakeProviderApis) -> None:
    api = sourced(settings, database_url, fake, STRIPE_SOURCES="thin",
                  STRIPE_THIN_WEBHOOK_SECRET="whsec_thin_destination_secret",
                  STRIPE_THIN_EVENTS="thin", STRIPE_THIN_API_KEY=STRIPE_KEY)
    for n in range(3):
        paid = provider_events.stripe_object("invoice", id=f"in_thin_{n}", status="paid")
        fake.serve_stripe_v2(provider_events.stripe_thin_event(
            "v1.invoice.paid", paid, event_id=f"evt_thin_{n}",
            created=datetime.now(UTC) - timedelta(minutes=n), data={}))
    [result] = run_clock(api)  # the default source has no key: only the thin one
    assert (result.source, result.error, result.recorded) == ("thin", None, 3)
    assert recorded(clean_db) == [(f"evt_thin_{n}", "thin", None, "reconcile")
                                  for n in range(3)]
    assert rows(clean_db, "SELECT payload->>'object' FROM webhook_events") == [
        ("v2.core.event",)] * 3
    assert {path for path, _, _ in fake.state.stripe_auth} == {"/v2/core/events"}


def test_two_sources_of_one_provider_are_reconciled_each_with_its_own_key(
        clean_db: Engine, settings: Settings, database_url: str,
        fake: FakeProviderApis) -> None:
    api = sourced(settings, database_url, fake, STRIPE_API_KEY=STRIPE_KEY,
                  STRIPE_SOURCES="eu", STRIPE_EU_WEBHOOK_SECRET="whsec_second_account",
                  STRIPE_EU_API_KEY=EU_KEY)
    fake.state.stripe_events = platform_events("us", 3)
    fake.state.stripe_key_events[EU_KEY] = platform_events("eu", 2)
    results = run_clock(api)
    assert [(r.source, r.error, r.recorded) for r in results] == [
        ("stripe", None, 3), ("eu", None, 2)]
    assert recorded(clean_db) == sorted(
        [(f"evt_eu_{n}", "eu", None, "reconcile") for n in (1, 2)]
        + [(f"evt_us_{n}", "stripe", None, "reconcile") for n in (1, 2, 3)])
    assert {key for _, key, _ in fake.state.stripe_auth} == {STRIPE_KEY, EU_KEY}
    assert rows(clean_db, "SELECT provider, source, runs, last_error FROM reconcile_runs "
                "ORDER BY source") == [("stripe", "eu", 1, None), ("stripe", "stripe", 1, None)]


def test_after_a_failover_each_source_is_reconciled_until_it_succeeds(
        clean_db: Engine, settings: Settings, database_url: str,
        fake: FakeProviderApis) -> None:
    api = sourced(settings, database_url, fake, STRIPE_API_KEY=STRIPE_KEY,
                  STRIPE_SOURCES="eu", STRIPE_EU_WEBHOOK_SECRET="whsec_second_account",
                  STRIPE_EU_API_KEY=EU_KEY, RECONCILE_INTERVAL_SECONDS="0")
    fake.state.stripe_events = platform_events("us", 2)  # EU_KEY unknown yet: 401
    timeline = stage_failover(clean_db, ago=timedelta(minutes=1))
    engine = db.create_engine(api, pool_size=1, autocommit=True)
    try:
        first = schedule.reconcile_after_failover(api, engine, NoBroker())  # type: ignore[arg-type]
        assert [(r.source, r.error is None) for r in first] == [("stripe", True), ("eu", False)]
        fake.state.stripe_key_events[EU_KEY] = platform_events("eu", 2)
        platform_requests = sum(1 for _, key, _ in fake.state.stripe_auth if key == STRIPE_KEY)
        second = schedule.reconcile_after_failover(api, engine, NoBroker())  # type: ignore[arg-type]
        assert [(r.source, r.error, r.recorded) for r in second] == [("eu", None, 2)]
        # the platform's source, done after the failover, is not listed again
        assert sum(1 for _, key, _ in fake.state.stripe_auth
                   if key == STRIPE_KEY) == platform_requests
        assert schedule.reconcile_after_failover(api, engine, NoBroker()) == []  # type: ignore[arg-type]
    finally:
        engine.dispose()
    assert rows(clean_db, "SELECT provider, source FROM failover_reconciles WHERE "
                f"timeline_id = {timeline} ORDER BY source") == [
        ("stripe", "eu"), ("stripe", "stripe")]
    assert [r[:2] for r in recorded(clean_db)] == [
        ("evt_eu_1", "eu"), ("evt_eu_2", "eu"), ("evt_us_1", "stripe"), ("evt_us_2", "stripe")]


def test_the_reconcile_command_takes_a_source(
        clean_db: Engine, settings: Settings, database_url: str,
        fake: FakeProviderApis) -> None:
    from click.testing import CliRunner

    from webhooks.cli import main

    fake.state.stripe_account_events = {"acct_Q": account_events("acct_Q", 4)}
    fake.state.stripe_accounts = [provider_events.stripe_account("acct_Q", NOW)]
    fake.state.stripe_events = platform_events("platform", 2)
    env = {"DATABASE_URL": database_url, "BROKER_URL": settings.broker_url or "",
           "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "STRIPE_API_BASE": fake.url,
           "WEBHOOKS_DATA_DIR": str(settings.data_dir), **connect_env()}
    runner = CliRunner()
    done = runner.invoke(main, ["reconcile", "stripe/connect"], env=env)
    assert done.exit_code == 0, done.output
    assert done.output == "listed 4, already recorded 0, recorded 4\n"
    assert [r[1:3] for r in recorded(clean_db)] == [("connect", "acct_Q")] * 4
    unknown = runner.invoke(main, ["reconcile", "stripe/nope"], env=env)
    assert unknown.exit_code == 2 and "'stripe/nope' is not a configured source" in unknown.output
    assert runner.invoke(main, ["reconcile", "shopify"], env=env).exit_code == 2  # no event API
    # The default source has no key: `reconcile stripe` is its configured sources'.
    again = runner.invoke(main, ["reconcile", "stripe"], env=env)
    assert again.output == "listed 4, already recorded 4, recorded 0\n"
    no_key = runner.invoke(main, ["reconcile", "stripe"],
                           env={**env, "STRIPE_CONNECT_API_KEY": ""})
    assert no_key.exit_code == 1 and "STRIPE_API_KEY" in no_key.output
