"""Guarantee 6 (docs/guarantees.md): an event the provider has but never delivered is
recorded by reconciliation and applied exactly once, however reconciliation and late
deliveries interleave.

The provider is a fake Stripe API over HTTP (tests/fakes/provider_apis.py) holding every
event, as Stripe's API serves it (each laid over Stripe's published object of its type:
decimal strings, nested lists, nulls); 70% of them are delivered to the real `web` while
the real `webhooks reconcile` runs, and the real `clock` reconciles too."""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.acceptance import checks, senders
from tests.acceptance.harness import ROOT, Service, System
from tests.acceptance.world import World
from tests.fakes.provider_apis import STRIPE_KEY, FakeProviderApis
from tests.fakes.provider_events import dress_stripe

EVENTS = 1000
DELIVERED = 0.7


@pytest.fixture()
def stripe_api() -> Iterator[FakeProviderApis]:
    with FakeProviderApis() as fake:
        yield fake


def stripe_world(seed: int, count: int) -> World:
    world = World(rng=random.Random(seed))
    world._clock = int(time.time()) - 3600  # created in the last hour: within the window
    makers = (world.invoice, world.invoice, world.invoice, world.refunds_of_charge,
              world.subscription_history, world.payment_failed, world.unhandled_stripe)
    while len(world.events) < count:
        world.rng.choice(makers)()
    return world


def reconcile(system: System, api: FakeProviderApis,
              *args: str) -> subprocess.CompletedProcess[str]:
    env = {**system.env(), "STRIPE_API_KEY": STRIPE_KEY, "STRIPE_API_BASE": api.url}
    return subprocess.run(["webhooks", "reconcile", "stripe", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_reconciliation_and_late_deliveries_apply_every_event_once(  # type: ignore[no-untyped-def]
        fresh: System, stripe_api: FakeProviderApis) -> None:
    world = stripe_world(9001, EVENTS)
    stripe_api.state.stripe_events = [dress_stripe(json.loads(event.body))
                                      for event in world.events]
    delivered = world.rng.sample(world.events, int(len(world.events) * DELIVERED))
    plans = senders.spread(world.deliveries(delivered, 1, 2), 6)
    env = {**fresh.env(), "STRIPE_API_KEY": STRIPE_KEY, "STRIPE_API_BASE": stripe_api.url}
    # The reconciliation starts while the deliveries flow, and lists before they end.
    running = subprocess.Popen(["webhooks", "reconcile", "stripe"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    answers = senders.send(fresh.base_url, plans)
    out, err = running.communicate(timeout=600)
    assert running.returncode == 0, err
    assert out.startswith(f"listed {len(world.events)}, already recorded "), out
    fresh.settle()

    assert checks.statuses(answers) == {200: len(answers)}
    counts = checks.assert_exactly_once(fresh, world)
    via = dict(fresh.rows("SELECT received_via, count(*) FROM webhook_events GROUP BY 1"))
    assert via.get("reconcile", 0) >= len(world.events) - len(delivered)
    assert sum(via.values()) == len(world.events)

    again = reconcile(fresh, stripe_api)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (f"listed {len(world.events)}, already recorded "
                                    f"{len(world.events)}, recorded 0")
    print(f"\nreconciliation: {len(world.events)} events, {len(delivered)} delivered "
          f"({len(answers)} deliveries) while `webhooks reconcile` ran; by way of {via}; "
          f"{counts}")


def test_the_clock_reconciles_and_an_api_outage_delays_it(  # type: ignore[no-untyped-def]
        fresh: System, stripe_api: FakeProviderApis, tmp_path) -> None:
    world = stripe_world(9002, 120)
    stripe_api.state.stripe_events = [dress_stripe(json.loads(event.body))
                                      for event in world.events]
    stripe_api.state.fail_after = 0  # the API is down when the clock first tries
    env = {**fresh.env(), "STRIPE_API_KEY": STRIPE_KEY, "STRIPE_API_BASE": stripe_api.url,
           "RECONCILE_INTERVAL_SECONDS": "2"}
    clock = Service("clock.reconcile", "webhooks clock", env, tmp_path / "clock.log")
    clock.start()
    try:
        deadline = time.monotonic() + 60
        while not fresh.rows("SELECT failures FROM reconcile_runs WHERE failures > 0"):
            assert time.monotonic() < deadline, "the clock never tried"
            time.sleep(0.5)
        assert fresh.scalar("SELECT count(*) FROM webhook_events") == 0
        stripe_api.state.fail_after = None  # the API is back: the next interval records all
        deadline = time.monotonic() + 90
        while fresh.scalar("SELECT count(*) FROM webhook_events") < len(world.events):
            assert time.monotonic() < deadline, "the clock did not reconcile"
            time.sleep(0.5)
        fresh.settle()
        checks.assert_exactly_once(fresh, world)
        last = fresh.rows("SELECT last_success_at, last_error FROM reconcile_runs")[0]
        assert last.last_success_at > datetime.now(UTC) - timedelta(minutes=1)
    finally:
        clock.stop()
