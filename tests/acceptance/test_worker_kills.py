"""Guarantee 2 (docs/guarantees.md): a worker killed at any moment (kill -9) loses nothing
and applies nothing twice; its work is done by another worker (or by itself, restarted as a
platform does). And the same through a pooler in transaction mode (docs/several-hosts.md,
"Behind a pooler").

Among the jobs are test handler events (World.slow_credit) that add to a balance with no
business key and hold their transaction open 0.2 s: most kills land inside one, and a job
applied twice, or applied and then lost, would show in that balance."""

from __future__ import annotations

import random
import threading
import time

from tests.acceptance import checks, senders
from tests.acceptance.harness import System
from tests.acceptance.senders import Answer
from tests.acceptance.world import Event, World

BACKLOG = (560, 140)  # (mixed events, slow credits) pending before any worker runs
STREAMED = (240, 60)  # arriving during the drain
STREAM_RATE = 30.0  # deliveries per second
MIN_KILLS = 6


def events(world: World, mixed: int, slow: int, rng: random.Random) -> list[Event]:
    first = len(world.events)
    world.mixed(first + mixed)
    for _ in range(slow):
        world.slow_credit()
    batch = world.events[first:]
    rng.shuffle(batch)
    return batch


def kill_during_drain(system: System, rng: random.Random,
                      streaming: threading.Thread, deadline: float) -> list[tuple[str, bool]]:
    """kill -9 at random moments while jobs are pending or arriving, alternately a whole
    worker and one Dramatiq worker process. The harness's supervisor restarts whatever
    exits, as a platform does."""
    kills: list[tuple[str, bool]] = []
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.3, 1.2))
        if not system.unfinished()[0] and not streaming.is_alive():
            break
        done = system.kill_a_worker(rng, whole_group=len(kills) % 2 == 0)
        if done is not None:
            kills.append(done)
    return kills


def rollbacks(system: System) -> int:
    return int(system.scalar("SELECT xact_rollback FROM pg_stat_database "
                             "WHERE datname = current_database()"))


def test_workers_killed_during_a_drain_apply_every_job_once(fresh: System) -> None:
    drain_with_kills(fresh)


def test_workers_killed_through_a_transaction_pooler_apply_every_job_once(
        fresh_pooled: System) -> None:
    """The same, with web, worker and clock behind PgBouncer in transaction mode
    (DATABASE_POOLER=transaction; harness.System's `pooled`): a killed worker's client
    connection ends at PgBouncer, which closes the server session of its open transaction,
    and the server rolls it back."""
    before = checks.pooled_transactions(fresh_pooled)
    jobs = drain_with_kills(fresh_pooled)
    checks.assert_through_the_pooler(fresh_pooled, before, at_least=jobs)


def drain_with_kills(fresh: System) -> int:
    """The scenario and its checks; the number of jobs."""
    rng = random.Random(7002)
    world = World(rng=random.Random(7003))
    backlog = events(world, *BACKLOG, rng)
    streamed = events(world, *STREAMED, rng)
    with fresh.held(*fresh.workers):  # a backlog: jobs pending, no worker running
        answers = senders.send(fresh.base_url, senders.spread(backlog, 4))
        assert fresh.unfinished()[0] == len(backlog)

    late: list[Answer] = []
    streaming = threading.Thread(target=lambda: late.extend(senders.send(
        fresh.base_url, senders.spread(streamed, 2, rate=STREAM_RATE))))
    exits_before = sum(len(w.exits) for w in fresh.workers)
    rolled_back = rollbacks(fresh)
    started = time.monotonic()
    streaming.start()
    kills = kill_during_drain(fresh, rng, streaming, deadline=started + 150)
    streaming.join()
    drained = time.monotonic() - started
    settling = fresh.settle()
    rolled_back = rollbacks(fresh) - rolled_back

    assert checks.statuses(answers + late) == {200: len(world.events)}
    mid_job = sum(mid for _, mid in kills)
    assert len(kills) >= MIN_KILLS and mid_job >= 2, kills
    assert rolled_back > 0  # the kills did cut transactions short
    counts = checks.assert_exactly_once(fresh, world)
    restarts = sum(len(w.exits) for w in fresh.workers) - exits_before
    attempts = dict(fresh.rows("SELECT attempts, count(*) FROM jobs GROUP BY 1 ORDER BY 1"))
    email_attempts = dict(fresh.rows(
        "SELECT attempts, count(*) FROM outbox GROUP BY 1 ORDER BY 1"))
    path = "through PgBouncer" if fresh.pgbouncer is not None else "direct"
    print(f"\nworker kills ({path}): {len(world.events)} jobs ({len(backlog)} backlog, "
          f"{len(streamed)} streamed at {STREAM_RATE:.0f}/s; {BACKLOG[1] + STREAMED[1]} "
          f"slow credits) drained in {drained:.1f}s with {len(kills)} kill -9, {mid_job} "
          f"inside a job transaction {[what for what, _ in kills]}; {rolled_back} "
          f"transactions rolled back; {restarts} worker restarts; job attempts {attempts}; "
          f"email attempts {email_attempts}; emails settled {settling:.1f}s later; {counts}")
    return len(world.events)
