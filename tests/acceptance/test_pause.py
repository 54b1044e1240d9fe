"""Pause and resume with deliveries flowing, two worker processes and the clock: while
Stripe is paused nothing of it runs and the other providers run as before; after resume
every Stripe event runs, once. Prints the pause-to-stop and resume-to-start latencies and
the other providers' ack-to-done delay before and during the pause."""

from __future__ import annotations

import random
import statistics
import subprocess
import threading
import time
from datetime import datetime

from tests.acceptance import checks, senders
from tests.acceptance.harness import ROOT, System
from tests.acceptance.world import World

RATE = 40  # deliveries per second, about half Stripe, half the others


def webhooks(system: System, *args: str) -> str:
    done = subprocess.run(["webhooks", *args], cwd=ROOT, env=system.env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def others_delay_ms(system: System, since: datetime, until: datetime) -> float:
    """Median ack-to-done delay of the non-Stripe jobs received in [since, until)."""
    rows = system.rows(
        "SELECT extract(epoch FROM j.finished_at - e.received_at) * 1000 AS ms "
        "FROM jobs j JOIN webhook_events e USING (provider, source, event_id) "
        "WHERE e.provider <> 'stripe' AND j.status = 'done' "
        "AND e.received_at >= :since AND e.received_at < :until", since=since, until=until)
    return statistics.median(float(r.ms) for r in rows) if rows else float("nan")


def test_pause_stops_a_provider_and_resume_runs_it_once(fresh: System) -> None:
    world = World(rng=random.Random(9100))
    for _ in range(140):
        world.rng.choice([world.invoice, world.payment_failed])()
        world.other_provider(world.rng.choice(["github", "paddle", "standard"]))
    deliveries = world.deliveries(None, 1, 1)
    seconds = len(deliveries) / RATE
    answers: list[senders.Answer] = []
    sending = threading.Thread(target=lambda: answers.extend(senders.send(
        fresh.base_url, senders.spread(deliveries, 4, rate=RATE))))
    started = fresh.scalar("SELECT now()")
    sending.start()
    time.sleep(seconds / 3)
    asked_at = fresh.scalar("SELECT now()")
    webhooks(fresh, "pause", "stripe")
    paused_at = fresh.scalar("SELECT paused_at FROM paused_providers")  # its commit
    stopped_at = fresh.scalar("SELECT now()")
    time.sleep(seconds / 3)
    ran_while_paused = fresh.scalar(
        "SELECT count(*) FROM jobs WHERE provider = 'stripe' AND finished_at > :t",
        t=stopped_at)
    last_before = fresh.scalar("SELECT max(finished_at) FROM jobs WHERE provider = 'stripe'")
    waiting = fresh.scalar("SELECT count(*) FROM jobs WHERE provider = 'stripe' AND "
                           "status = 'pending'")
    asked_resume_at = fresh.scalar("SELECT now()")
    webhooks(fresh, "resume", "stripe")
    resumed_at = fresh.scalar("SELECT now()")  # just after the resume's commit
    sending.join(300)
    fresh.settle()
    first_after = fresh.scalar("SELECT min(finished_at) FROM jobs WHERE provider = 'stripe' "
                               "AND finished_at > :t", t=asked_resume_at)

    assert ran_while_paused == 0
    assert waiting > 0
    assert checks.statuses(answers) == {200: len(answers)}
    counts = checks.assert_exactly_once(fresh, world)
    before = others_delay_ms(fresh, started, asked_at)
    during = others_delay_ms(fresh, stopped_at, resumed_at)
    stop_ms = max((last_before - paused_at).total_seconds() * 1000, 0) if last_before else 0
    # Jobs may run before the command has returned (0: the resume's wake-up was faster).
    start_ms = max((first_after - resumed_at).total_seconds() * 1000, 0)
    assert start_ms < 5000
    print(f"\npause: {len(deliveries)} deliveries at {RATE}/s, 2 worker processes; last "
          f"Stripe job done {stop_ms:.0f} ms after the pause committed; {waiting} Stripe "
          f"jobs waited; first done {start_ms:.0f} ms after the resume committed; other providers' "
          f"median ack-to-done {before:.0f} ms before the pause, {during:.0f} ms during; "
          f"{counts}")
