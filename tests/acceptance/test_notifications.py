"""Notifications (SPEC "Notifications"), end to end: the real web, workers and clock, with
a fake Slack and a fake Standard Webhooks receiver on loopback (tests/fakes/notify_receivers.py:
the receiver verifies every signature with the `standardwebhooks` library), the fake
Postmark for the email channel, and a fake Stripe API for reconciliation.

A poison event (tests/handlers_for_tests.py `test.poison`, which always raises) is one
`job.failed` on each channel: also when the receiver answers 500 first, and when the
worker is killed (SIGKILL) while the receiver holds the request (the same `webhook-id`
after the restart). A burst is a handful of messages with counts; good events after it one
`provider.recovered`; a reconciliation that records missed events one `reconcile.found`."""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.acceptance import senders
from tests.acceptance.harness import System, wait_for
from tests.acceptance.world import Event, World
from tests.fakes.notify_receivers import NotifyReceivers
from tests.fakes.provider_apis import STRIPE_KEY, FakeProviderApis
from tests.fakes.provider_events import dress_stripe

SECRET = "whsec_" + base64.b64encode(b"acceptance-notifications-secret!").decode()
WINDOW_SECONDS = 3
EMAIL_TO = "oncall@example.com"


@pytest.fixture(scope="module")
def fakes() -> Iterator[NotifyReceivers]:
    with NotifyReceivers(SECRET) as receivers:
        yield receivers


@pytest.fixture(scope="module")
def stripe_api() -> Iterator[FakeProviderApis]:
    with FakeProviderApis() as api:
        yield api


@pytest.fixture(scope="module")
def notifying(tmp_path_factory: pytest.TempPathFactory, fakes: NotifyReceivers,
              stripe_api: FakeProviderApis) -> Iterator[System]:
    running = System(
        tmp_path_factory.mktemp("notifications"),
        NOTIFY_SLACK_WEBHOOK_URL=fakes.slack_url, NOTIFY_WEBHOOK_URL=fakes.webhook_url,
        NOTIFY_WEBHOOK_SECRET=SECRET, NOTIFY_EMAIL_TO=EMAIL_TO,
        NOTIFY_WINDOW_SECONDS=str(WINDOW_SECONDS), JOB_MAX_ATTEMPTS="3",
        STRIPE_API_KEY=STRIPE_KEY, STRIPE_API_BASE=stripe_api.url,
        RECONCILE_INTERVAL_SECONDS="2")
    try:
        yield running.start()
    finally:
        running.stop()


@pytest.fixture()
def system(notifying: System, fakes: NotifyReceivers, stripe_api: FakeProviderApis,
           request: pytest.FixtureRequest) -> Iterator[System]:
    stripe_api.state.stripe_events = []
    notifying.heal()
    notifying.reset()
    fakes.reset()
    yield notifying
    stripe_api.state.stripe_events = []
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(notifying.logs(60))


def poison(world: World) -> Event:
    return world._stripe("test.poison", {"id": f"obj_{len(world.events)}"})


def deliver(system: System, events: list[Event]) -> None:
    with requests.Session() as session:
        for index, event in enumerate(events):
            answer = senders.post(session, system.base_url, index, event)
            assert answer.status == 200, answer.error


def notifications(system: System, kind: str | None = None) -> list[Any]:
    return system.rows("SELECT * FROM notifications WHERE CAST(:kind AS text) IS NULL "
                       "OR kind = :kind ORDER BY created_at, id", kind=kind)


def settled(system: System, kind: str, count: int = 1) -> list[Any]:
    """Wait until `count` notifications of kind are recorded and none is pending."""
    def done() -> list[Any] | None:
        found = notifications(system, kind)
        if len(found) >= count and all(n.status != "pending" for n in found):
            return found
        return None

    found: list[Any] = wait_for(done, 120, f"{count} {kind} notification(s) settled",
                                interval=0.25)
    return found


def slack_texts(fakes: NotifyReceivers, kind: str) -> list[str]:
    return [r.json["text"] for r in fakes.received("slack") if r.json["text"].startswith(kind)]


def webhook_bodies(fakes: NotifyReceivers, kind: str) -> list[dict[str, Any]]:
    return [r.json for r in fakes.received("webhook") if r.json["type"] == kind]


def emails(system: System, notification_id: str) -> int:
    by_key: dict[str, int] = system.postmark_messages()["by_key"]
    return by_key.get(f"notification:{notification_id}", 0)


def assert_one_on_each_channel(system: System, fakes: NotifyReceivers, note: Any) -> None:
    assert note.status == "sent"
    [text] = slack_texts(fakes, "job.failed")
    assert "stripe" in text and "poison event" in text
    [body] = webhook_bodies(fakes, "job.failed")
    assert body["data"]["id"] == note.id and body["data"]["count"] == 1
    assert {r.webhook_id for r in fakes.received("webhook")} == {note.id}
    assert emails(system, note.id) == 1


def test_a_poison_event_is_one_job_failed_on_each_channel(system: System,
                                                         fakes: NotifyReceivers) -> None:
    world = World(rng=random.Random(27))
    deliver(system, [poison(world)])
    [note] = settled(system, "job.failed")
    assert (note.provider, note.source, note.count) == ("stripe", "stripe", 1)
    assert_one_on_each_channel(system, fakes, note)
    time.sleep(2)  # sweeps and wake-ups later: still one of each
    assert_one_on_each_channel(system, fakes, note)
    assert system.scalar("SELECT status FROM jobs") == "failed"


def test_a_receiver_answering_500_first_gets_the_same_webhook_id_again(
        system: System, fakes: NotifyReceivers) -> None:
    fakes.set_mode("webhook", fail_first=1)
    deliver(system, [poison(World())])
    [note] = settled(system, "job.failed")
    attempts = fakes.requests("webhook")
    assert [r.answered for r in attempts] == [500, 204]
    assert {r.webhook_id for r in attempts} == {note.id}
    assert_one_on_each_channel(system, fakes, note)


def test_a_worker_killed_while_the_receiver_holds_the_request_sends_the_same_id(
        system: System, fakes: NotifyReceivers) -> None:
    fakes.set_mode("webhook", hold=True)
    deliver(system, [poison(World())])
    fakes.wait_for("webhook", 1, timeout=60)
    for worker in system.workers:
        worker.kill()  # SIGKILL of the whole group; the supervisor restarts it
    fakes.release()
    # The delivery's lease runs out (worker/notify.py LEASE_SECONDS) and it is sent again.
    fakes.wait_for("webhook", 2, timeout=120)
    [note] = settled(system, "job.failed")
    assert {r.webhook_id for r in fakes.requests("webhook")} == {note.id}
    assert len(fakes.received("webhook")) >= 1
    assert len(slack_texts(fakes, "job.failed")) == 1 and emails(system, note.id) == 1


def test_a_burst_is_a_handful_of_messages_and_recovery_is_one(system: System,
                                                              fakes: NotifyReceivers) -> None:
    world = World(rng=random.Random(40))
    deliver(system, [poison(world) for _ in range(40)])
    wait_for(lambda: system.scalar("SELECT count(*) FROM jobs WHERE status = 'failed'") == 40,
             120, "40 failed jobs")
    time.sleep(WINDOW_SECONDS + 1)  # the last window closes, its tail falls due
    found = settled(system, "job.failed")
    assert sum(n.count for n in found) == 40
    # Each window is its first message and one tail: a few per window the failures span.
    span = (found[-1].created_at - found[0].created_at).total_seconds()
    windows = int(span // WINDOW_SECONDS) + 1
    assert 2 <= len(found) <= min(2 * windows, 10), ([n.count for n in found], span)
    bodies = webhook_bodies(fakes, "job.failed")
    assert sorted(b["data"]["count"] for b in bodies) == sorted(n.count for n in found)
    assert len(slack_texts(fakes, "job.failed")) == len(found)
    [failing] = settled(system, "provider.failing")
    assert failing.count >= 10

    good = [event for _ in range(3) for event in world.invoice()]
    deliver(system, good)
    system.settle()
    [recovered] = settled(system, "provider.recovered")
    assert (recovered.provider, recovered.source) == ("stripe", "stripe")
    time.sleep(2)
    assert len(notifications(system, "provider.recovered")) == 1
    assert len(webhook_bodies(fakes, "provider.recovered")) == 1


def test_a_reconciliation_that_finds_missed_events_is_one_reconcile_found(
        system: System, fakes: NotifyReceivers, stripe_api: FakeProviderApis) -> None:
    world = World(rng=random.Random(6))
    world._clock = int(time.time()) - 600  # within the reconciliation's window
    for _ in range(3):
        world.invoice()
    stripe_api.state.stripe_events = [dress_stripe(json.loads(e.body)) for e in world.events]
    [found] = settled(system, "reconcile.found")
    assert found.count == len(world.events) and found.provider == "stripe"
    system.settle()
    time.sleep(5)  # more runs: they find nothing new
    assert len(notifications(system, "reconcile.found")) == 1
    [body] = webhook_bodies(fakes, "reconcile.found")
    assert body["data"]["count"] == len(world.events)
