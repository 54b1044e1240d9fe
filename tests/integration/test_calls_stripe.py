"""Calls to Stripe (target `stripe`) made once per key against the fake Stripe API, which
keeps idempotency keys as Stripe documents them (tests/fakes/provider_apis.py, its refunds
built from Stripe's OpenAPI fixtures): an answer lost after Stripe made the refund, a 500
Stripe saved for the key, a worker killed mid-request, a "sent" mark lost to a failover.
The fake counts the refunds made per key: one, whatever the fault."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories
from tests.fakes.provider_apis import STRIPE_KEY, FakeProviderApis
from webhooks.shared import handlers
from webhooks.shared.call_targets import Target
from webhooks.shared.settings import Settings
from webhooks.worker import calls as dispatcher
from webhooks.worker import jobs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def fake() -> Iterator[FakeProviderApis]:
    with FakeProviderApis() as running:
        yield running


@pytest.fixture()
def stripe_settings(settings: Settings, fake: FakeProviderApis) -> Settings:
    return dataclasses.replace(settings, default_options={"stripe": {"api_key": STRIPE_KEY}},
                               api_bases={"stripe": fake.url})


@pytest.fixture(autouse=True)
def refund_handler() -> Iterator[None]:
    """On a dispute, refund the charge: one refund per charge, keyed by it."""

    @handlers.handler("stripe", "test.calls.dispute")
    def refund(ctx: handlers.JobContext) -> str:
        dispute = ctx.payload["data"]["object"]
        ctx.queue_call(key=f"refund:{dispute['charge']}", target="stripe", method="POST",
                       path="/v1/refunds", params={"charge": dispute["charge"],
                                                   "amount": dispute["amount"]})
        return "refund queued"

    yield
    handlers._registry.pop(("stripe", "test.calls.dispute"))


def dispute(charge: str, event_id: str) -> dict[str, Any]:
    return factories.stripe_event("test.calls.dispute", {
        "id": f"dp_{event_id}", "object": "dispute", "charge": charge, "amount": 700},
        event_id=event_id)


def rows(engine: Engine, statement: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(statement))]


def queue(engine: Engine, settings: Settings, charge: str, *events: str,
          account: str | None = None) -> None:
    for event_id in events:
        factories.insert_event_and_job(engine, dispute(charge, event_id))
    if account is not None:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE webhook_events SET account = :a"), {"a": account})
    assert jobs.process_batch(engine, settings).done == len(events)


def due_now(engine: Engine) -> None:
    """The retry's backoff, or a dead dispatcher's lease, run out."""
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE calls SET run_at = now()"))


def test_a_refund_is_made_once_with_its_key_and_the_events_account(
        clean_db: Engine, stripe_settings: Settings, fake: FakeProviderApis) -> None:
    queue(clean_db, stripe_settings, "ch_1", "evt_d1", "evt_d2", account="acct_9")
    assert rows(clean_db, "SELECT key, account FROM calls") == [("refund:ch_1", "acct_9")]
    assert dispatcher.dispatch_due(clean_db, stripe_settings).sent == 1
    assert fake.state.stripe_posts == [("/v1/refunds", "refund:ch_1", "acct_9", False)]
    [refund_id] = fake.state.created["refund:ch_1"]
    refund = fake.state.posted_objects[refund_id]
    assert (refund["object"], refund["charge"], refund["amount"]) == ("refund", "ch_1", 700)
    assert rows(clean_db, "SELECT status, response_status, response->>'id' FROM calls") == [
        ("sent", 200, refund_id)]


def test_an_answer_lost_after_the_refund_is_retried_with_its_key_one_refund(
        clean_db: Engine, stripe_settings: Settings, fake: FakeProviderApis) -> None:
    queue(clean_db, stripe_settings, "ch_2", "evt_d3")
    fake.state.drop_after_create = 1
    assert dispatcher.dispatch_due(clean_db, stripe_settings).retried == 1
    due_now(clean_db)
    assert dispatcher.dispatch_due(clean_db, stripe_settings).sent == 1
    assert [replayed for _, _, _, replayed in fake.state.stripe_posts] == [False, True]
    assert len(fake.state.created["refund:ch_2"]) == 1
    [(response_id,)] = rows(clean_db, "SELECT response->>'id' FROM calls")
    assert [response_id] == fake.state.created["refund:ch_2"]


def test_a_500_stripe_saved_stays_unknown_and_is_ambiguous_past_the_keys_lifetime(
        clean_db: Engine, stripe_settings: Settings, fake: FakeProviderApis) -> None:
    short = dataclasses.replace(stripe_settings, call_targets={
        "stripe": Target("stripe", key_hours=2 / 3600)})
    queue(clean_db, short, "ch_3", "evt_d4")
    fake.state.fail_after_create = 1
    assert dispatcher.dispatch_due(clean_db, short).retried == 1
    due_now(clean_db)
    assert dispatcher.dispatch_due(clean_db, short).retried == 1  # the saved 500, replayed
    assert fake.state.stripe_posts[-1][3] is True
    time.sleep(2.1)
    due_now(clean_db)
    assert dispatcher.dispatch_due(clean_db, short).ambiguous == 1
    assert len(fake.state.stripe_posts) == 2  # never sent past the lifetime
    assert len(fake.state.created["refund:ch_3"]) == 1
    assert rows(clean_db, "SELECT status FROM calls") == [("ambiguous",)]
    assert rows(clean_db, "SELECT kind FROM notifications") == [("call.ambiguous",)]


def test_a_sent_mark_lost_to_a_failover_sends_the_key_again_and_stripe_replays_it(
        clean_db: Engine, stripe_settings: Settings, fake: FakeProviderApis) -> None:
    """An asynchronous standby promoted without the dispatcher's "sent" mark holds the call
    as it was claimed: due again, it sends the same key, and Stripe replays the refund."""
    queue(clean_db, stripe_settings, "ch_4", "evt_d5")
    assert dispatcher.dispatch_due(clean_db, stripe_settings).sent == 1
    with clean_db.begin() as conn:  # the row as the new primary has it
        conn.execute(sa.text("UPDATE calls SET status = 'pending', response = NULL, "
                             "response_status = NULL, sent_at = NULL, run_at = now()"))
    assert dispatcher.dispatch_due(clean_db, stripe_settings).sent == 1
    assert [replayed for _, _, _, replayed in fake.state.stripe_posts] == [False, True]
    assert len(fake.state.created["refund:ch_4"]) == 1


CHILD = """
import os, signal
from webhooks.shared import db
from webhooks.shared.settings import Settings
from webhooks.worker import calls

send = calls._send

def send_then_die(*args, **kwargs):
    send(*args, **kwargs)  # Stripe made the refund; the worker dies before the mark
    os.kill(os.getpid(), signal.SIGKILL)

calls._send = send_then_die
settings = Settings.from_env()
calls.dispatch_due(db.create_engine(settings), settings)
raise SystemExit("still alive")
"""


def test_a_worker_killed_mid_send_leaves_one_refund(
        database_url: str, clean_db: Engine, stripe_settings: Settings,
        fake: FakeProviderApis) -> None:
    queue(clean_db, stripe_settings, "ch_5", "evt_d6")
    env = {**os.environ, "DATABASE_URL": database_url, "STRIPE_API_KEY": STRIPE_KEY,
           "STRIPE_API_BASE": fake.url, "PYTHONPATH": str(ROOT)}
    child = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=ROOT, timeout=60,
                           capture_output=True, text=True, check=False)
    assert child.returncode == -9, child.stderr
    assert rows(clean_db, "SELECT status, attempts FROM calls") == [("pending", 1)]
    assert dispatcher.dispatch_due(clean_db, stripe_settings).claimed == 0  # leased
    due_now(clean_db)  # the dead dispatcher's lease runs out
    assert dispatcher.dispatch_due(clean_db, stripe_settings).sent == 1
    assert len(fake.state.created["refund:ch_5"]) == 1
    assert rows(clean_db, "SELECT status, attempts FROM calls") == [("sent", 2)]
