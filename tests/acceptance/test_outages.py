"""Guarantee 3 (docs/guarantees.md): with the broker down, ingest still acknowledges and the
work is done once the broker is back; with the database down, ingest answers 503 (never a
200) and every event it acknowledged is applied exactly once."""

from __future__ import annotations

import random
import signal
import threading
import time

import requests

from tests.acceptance import checks, senders
from tests.acceptance.harness import System
from tests.acceptance.senders import Answer
from tests.acceptance.world import Event, World


def latency(answers: list[Answer]) -> tuple[float, float]:
    spans = sorted(a.ended - a.started for a in answers)
    return spans[len(spans) // 2], spans[-1]


def test_broker_outage_during_ingest(fresh: System) -> None:
    world = World(rng=random.Random(7004))
    world.mixed(300)
    deliveries = world.deliveries(low=1, high=2)
    fresh.redis.stop()
    try:
        answers = senders.send(fresh.base_url, senders.spread(deliveries, 4))
        time.sleep(3)  # several sweeps fail to enqueue meanwhile
        pending_in_outage = fresh.unfinished()[0]
    finally:
        fresh.redis.start()  # empty: every message enqueued before the outage is lost
    settling = fresh.settle()

    assert checks.statuses(answers) == {200: len(deliveries)}, [
        a.error for a in answers if a.status != 200][:3]
    checks.assert_one_first_delivery(answers)
    assert pending_in_outage == len(world.events)  # nothing could wake a worker
    p50, worst = latency(answers)
    assert worst < 5, f"acknowledging took up to {worst:.1f}s with the broker down"
    counts = checks.assert_exactly_once(fresh, world)
    print(f"\nbroker outage: {len(deliveries)} deliveries of {len(world.events)} events, "
          f"all 200 with Redis down (latency p50 {p50 * 1000:.0f} ms, max "
          f"{worst * 1000:.0f} ms); {pending_in_outage} jobs pending until it was back; "
          f"done by the sweeper {settling:.1f}s after; process exits {fresh.exits()}; "
          f"{counts}")


def resend_until_acknowledged(system: System, events: list[Event],
                              rounds: int = 20) -> list[Answer]:
    """As a provider does: deliver again what was not acknowledged, until it is."""
    answers: list[Answer] = []
    waiting = events
    for _ in range(rounds):
        if not waiting:
            break
        round_answers = senders.send(system.base_url, senders.spread(waiting, 2))
        answers += round_answers
        waiting = [e for e, a in zip(waiting, round_answers, strict=True) if a.status != 200]
        time.sleep(1 if waiting else 0)
    assert not waiting, f"{len(waiting)} events never acknowledged"
    return answers


def test_database_outage_during_ingest(fresh: System) -> None:
    world = World(rng=random.Random(7005))
    world.mixed(400)
    deliveries = world.deliveries(low=1, high=2)
    rate = len(deliveries) / 14  # a steady stream for 14 s; the outage in its middle
    answers: list[Answer] = []
    stream = threading.Thread(target=lambda: answers.extend(senders.send(
        fresh.base_url, senders.spread(deliveries, 4, rate=rate))))
    stream.start()
    time.sleep(5)
    stopping = time.time()
    fresh.postgres.stop("immediate")
    down = time.time()
    ready_in_outage = requests.get(f"{fresh.base_url}/readyz", timeout=10).status_code
    health_in_outage = requests.get(f"{fresh.base_url}/healthz", timeout=10).status_code
    time.sleep(4)
    restarting = time.time()
    fresh.postgres.start()
    stream.join()

    by_status = checks.statuses(answers)
    assert set(by_status) <= {200, 503}, [a.error for a in answers
                                           if a.status not in (200, 503)][:3]
    assert all(a.retry_after for a in answers if a.status == 503)
    during = [a for a in answers if a.started >= down and a.ended <= restarting]
    assert during and all(a.status == 503 for a in during), checks.statuses(during)
    assert (ready_in_outage, health_in_outage) == (503, 200)
    refused = {a.key for a in answers if a.status == 503}
    acknowledged = {a.key for a in answers if a.status == 200}
    resent = resend_until_acknowledged(
        fresh, [e for e in world.events if e.key in refused - acknowledged])
    settling = fresh.settle()

    checks.assert_one_first_delivery(answers + resent)
    counts = checks.assert_exactly_once(fresh, world)
    print(f"\ndatabase outage: {len(deliveries)} deliveries of {len(world.events)} events at "
          f"{rate:.0f}/s, Postgres stopped (immediate) {down - stopping:.1f}s after the "
          f"stop began and down {restarting - down:.1f}s: answers {by_status}, "
          f"{len(during)} sent wholly inside the outage all 503 with Retry-After; "
          f"{len(refused - acknowledged)} refused events re-sent in {len(resent)} "
          f"deliveries until acknowledged; settled {settling:.1f}s after; process exits "
          f"{fresh.exits()}; {counts}")


def test_a_wake_up_that_found_no_database_comes_back(fresh: System) -> None:
    """Worker wake-ups taken while Postgres is down fail, and come back a few seconds
    later (shared/wakeups.py database_back): the jobs they woke for are applied once the
    server is back, without the clock's next sweep (the clock is stopped here) and without
    another delivery to send a new wake-up. Before, each such wake-up was dropped and its
    jobs waited for a sweep (SWEEP_INTERVAL_SECONDS, 15 s by default)."""
    world = World(rng=random.Random(7007))
    world.mixed(30)
    clock = fresh.service("clock")
    failures_before = _failed_wake_ups(fresh)
    with fresh.held(clock):
        for worker in fresh.workers:
            worker.signal_group(signal.SIGSTOP)  # the wake-ups wait in Redis
        try:
            answers = senders.send(fresh.base_url, senders.spread(world.deliveries(), 4))
            assert checks.statuses(answers) == {200: len(answers)}
            assert fresh.unfinished()[0] > 0
            fresh.postgres.stop("immediate")
        finally:
            for worker in fresh.workers:
                worker.signal_group(signal.SIGCONT)  # they take the wake-ups: no database
        time.sleep(1.5)
        down = time.monotonic()
        fresh.postgres.start()
        settled = fresh.settle(timeout=30)
    failed = _failed_wake_ups(fresh) - failures_before
    print(f"\nwake-ups without a database: {len(world.events)} events, {failed} wake-ups "
          f"failed while Postgres was down and came back; applied "
          f"{time.monotonic() - down:.1f}s after its restart (settle {settled:.1f}s), the "
          f"clock stopped")
    assert failed > 0, "no wake-up was taken while the database was down"
    checks.assert_exactly_once(fresh, world)


def _failed_wake_ups(system: System) -> int:
    return sum(worker.log.read_text(errors="replace").count(
        "Failed to process message process_jobs") for worker in system.workers)
