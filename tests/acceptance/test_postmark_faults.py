"""Guarantee 4 (docs/guarantees.md): one email per idempotency key across Postmark errors
and lost responses, through the real worker processes and a fake Postmark running as its own
process."""

from __future__ import annotations

import random
import time
from typing import Any

from tests.acceptance import checks, senders
from tests.acceptance.harness import System
from tests.acceptance.world import Event, World

# Each phase sets one fault mode of the fake Postmark, then sends a wave of events whose
# emails meet it. The worker's Postmark client gives up after 10 s: the slow answer of
# 11 s is a lost response (Postmark accepted, the client timed out); the one of 2 s is not.
PHASES: list[tuple[str, dict[str, Any]]] = [
    ("500 before accepting (sends and searches)", {"fail_first": 4}),
    ("500 after accepting", {"error_after_accept": 3}),
    ("connection dropped after accepting", {"drop_after_accept": 3}),
    ("slow answer past the client timeout", {"slow_after_accept": 2, "delay": 11.0}),
    ("slow answer within the timeout", {"slow_after_accept": 2, "delay": 2.0}),
]
COUNTED = ("fail_first", "error_after_accept", "drop_after_accept", "slow_after_accept")


def wave(world: World) -> list[Event]:
    events: list[Event] = []
    for _ in range(6):
        events += world.invoice()
    for _ in range(2):
        events += world.payment_failed()
    return events


def faults_left(system: System) -> int:
    modes = system.postmark_control("mode", {})
    return sum(int(modes[name]) for name in COUNTED)


def test_postmark_faults_leave_one_message_per_key(fresh: System) -> None:
    world = World(rng=random.Random(7006))
    report = []
    for name, mode in PHASES:
        fresh.postmark_control("mode", mode)
        started, waves = time.monotonic(), 0
        # Waves of events, spread over a few seconds so their emails leave in several
        # requests, until the fault has been met as many times as it was set for.
        while faults_left(fresh) and waves < 8:
            waves += 1
            deliveries = world.deliveries(wave(world), 1, 3)
            answers = senders.send(fresh.base_url, senders.spread(deliveries, 2, rate=8))
            assert checks.statuses(answers) == {200: len(answers)}
            fresh.settle(timeout=120)
        assert not faults_left(fresh), f"fault {name!r} not met after {waves} waves"
        report.append(f"{name}: {waves} waves, {time.monotonic() - started:.0f}s")

    counts = checks.assert_exactly_once(fresh, world)
    requests = counts["postmark_requests"]
    assert requests.get("GET /messages/outbound", 0) > 0  # unknown outcomes were searched
    retried = fresh.rows("SELECT attempts, count(*) FROM outbox GROUP BY 1 ORDER BY 1")
    print(f"\npostmark faults: {len(world.emails)} keys; {'; '.join(report)}; outbox "
          f"attempts {dict(retried)}; {counts}")
