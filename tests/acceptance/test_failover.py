"""Guarantee 8 (docs/guarantees.md). Asynchronous half: after a failover to an asynchronous
standby, events acknowledged and then lost with the old primary are recorded again by the
reconciliation after the failover, and everything is applied once.

A primary and its streaming standby (tests/acceptance/replication.py); web, two workers
and the clock (the Procfile's, harness.System) on the two-host DATABASE_URL; a fake Stripe
API holding every event (tests/fakes/provider_apis.py); RECONCILE_INTERVAL_SECONDS=0, so
only the after-failover run can bring anything back. Signed invoice.paid deliveries:

1. a first batch, replicated;
2. the standby detached (it receives nothing more), then a second batch: 200s from the
   primary alone, applied there and their receipts sent through the fake Postmark;
3. a steady stream from a provider that retries every refused delivery, during which the
   primary is killed with -9 and the standby promoted.

Then every event answered 200 is on the new primary, the lost ones as `reconcile`, each
applied once (one ledger entry per invoice, one message per key at the fake Postmark,
whose receipts for the lost events were sent before the failover: the dispatcher's search
found them), and no process was restarted. Prints how many were lost and came back, and
the seconds from the promotion to the first 200 and to the reconciliation.

Synchronous half: the same processes on a synchronous pair with no API credentials (so
nothing can come back by reconciliation): the standby frozen with SIGSTOP gets every
delivery a 503 within 10 s, and after the kill and the promotion every delivery answered
200 is on the new primary, each applied once.
"""

from __future__ import annotations

import contextlib
import json
import random
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa

from tests.acceptance import checks, replication, senders
from tests.acceptance.harness import System, wait_for
from tests.acceptance.replication import ReplicatedPostgres
from tests.acceptance.world import Event, World
from tests.fakes.provider_apis import STRIPE_KEY, FakeProviderApis
from tests.fakes.provider_events import dress_stripe
from webhooks.shared.db import sqlalchemy_url
from webhooks.shared.models import SWEEP_HEARTBEAT

pytestmark = pytest.mark.slow

FIRST, SECOND, STREAM = 40, 40, 60
RATE = 20.0  # deliveries per second, all senders together
STREAM_GAP = 0.1  # seconds between two deliveries of the retrying provider
BACK_WITHIN = 15.0  # SPEC.md "Failover": web answers 200 again within 15 s of promotion
RECONCILED_WITHIN = 60.0  # and the clock reconciles within a minute of the new timeline


def invoices(world: World, count: int) -> list[Event]:
    return [event for _ in range(count) for event in world.invoice(both_types=False)]


@contextlib.contextmanager
def replicated_system(request: pytest.FixtureRequest, *, synchronous: bool,
                      **env: str) -> Iterator[tuple[System, ReplicatedPostgres]]:
    """The Procfile's processes on a primary and its standby, on the two-host URL."""
    reason = replication.available()
    if reason:
        pytest.skip(reason)
    pair = ReplicatedPostgres(synchronous=synchronous)
    with tempfile.TemporaryDirectory(prefix="webhooks-failover-") as workdir:
        system = System(Path(workdir), postgres=pair.primary, DATABASE_URL=pair.url,
                        RECONCILE_INTERVAL_SECONDS="0", **env)
        try:
            system.start()
            pair.start_standby()
            # Assertions read whichever host is the primary, as the processes do.
            system.engine = sa.create_engine(sqlalchemy_url(pair.url), poolclass=sa.pool.NullPool,
                                             connect_args={"connect_timeout": 3})
            yield system, pair
        finally:
            report = getattr(request.node, "rep_call", None)
            if report is not None and report.failed:
                print(system.logs(60))
            system.stop()
            pair.destroy()


@pytest.fixture()
def replicated(request: pytest.FixtureRequest) -> Iterator[tuple[System, ReplicatedPostgres,
                                                                  FakeProviderApis]]:
    with FakeProviderApis() as stripe_api, replicated_system(
            request, synchronous=False, STRIPE_API_KEY=STRIPE_KEY,
            STRIPE_API_BASE=stripe_api.url) as (system, pair):
        yield system, pair, stripe_api


@pytest.fixture()
def synchronous(request: pytest.FixtureRequest) -> Iterator[tuple[System, ReplicatedPostgres]]:
    # No API credentials: nothing is reconciled, so whatever a failover lost stays lost.
    with replicated_system(request, synchronous=True) as (system, pair):
        yield system, pair


class RetryingProvider(threading.Thread):
    """Delivers events one after another, each until it is answered 200 (as a provider
    retries a 503), STREAM_GAP apart; every answer kept."""

    def __init__(self, base_url: str, events: list[Event]) -> None:
        super().__init__(daemon=True, name="retrying-provider")
        self.base_url = base_url
        self.events = events
        self.answers: list[senders.Answer] = []

    def run(self) -> None:
        with requests.Session() as session:
            for index, event in enumerate(self.events):
                while True:
                    answer = senders.post(session, self.base_url, index, event)
                    self.answers.append(answer)
                    time.sleep(STREAM_GAP)
                    if answer.status == 200:
                        break


def acknowledged(answers: list[senders.Answer], before: float | None = None) -> set[str]:
    return {a.key[1] for a in answers if a.status == 200 and (before is None or a.ended < before)}


def test_events_lost_with_an_asynchronous_primary_come_back_and_apply_once(  # type: ignore[no-untyped-def]
        replicated) -> None:
    system, pair, stripe_api = replicated
    world = World(rng=random.Random(8008))
    world._clock = int(time.time()) - 600  # created in the last minutes: in every window
    first, second, stream = (invoices(world, n) for n in (FIRST, SECOND, STREAM))
    stripe_api.state.stripe_events = [dress_stripe(json.loads(e.body))
                                      for e in world.events]

    # The clock records the first timeline (the start); the standby has it and batch 1.
    wait_for(lambda: system.scalar("SELECT count(*) FROM database_timelines") == 1, 60,
             "the first timeline recorded")
    answers = senders.send(system.base_url, senders.spread(first, 4, rate=RATE))
    system.settle()
    pair.wait_replayed()

    pair.detach_standby()
    answers += senders.send(system.base_url, senders.spread(second, 4, rate=RATE,
                                                            first_index=len(first)))
    system.settle()  # applied on the primary alone, receipts sent
    assert checks.statuses(answers) == {200: len(answers)}
    pids = {s.name: s.process.pid for s in system.services if s.process}

    provider = RetryingProvider(system.base_url, stream)
    provider.start()
    time.sleep(2)
    pair.kill_primary()
    killed = time.time()
    time.sleep(1)
    promoted = time.time()  # asked for: pg_promote() returns once it is done
    done = pair.promote() - promoted
    # What the new primary had of the deliveries (a reconciled row is not one of them).
    on_standby = {row.event_id for row in system.rows(
        "SELECT event_id FROM webhook_events WHERE received_via = 'delivery'")}
    provider.join(300)
    assert not provider.is_alive(), "the stream was not acknowledged"

    every = answers + provider.answers
    acked_before = acknowledged(every, before=killed)
    lost = acked_before - on_standby
    assert set(e.event_id for e in second) <= lost  # the standby never received them
    back = [a.ended - promoted for a in provider.answers if a.status == 200 and a.ended > killed]
    first_200 = min(back)
    stream_statuses = checks.statuses(provider.answers)
    slowest = max(a.ended - a.started for a in provider.answers)

    reconciled_at = wait_for(lambda: system.scalar(
        "SELECT finished_at FROM failover_reconciles WHERE provider = 'stripe'"),
        RECONCILED_WITHIN + 30, "the reconciliation after the failover", interval=0.25)
    system.settle()
    counts = checks.assert_exactly_once(system, world)
    came_back = {row.event_id for row in system.rows(
        "SELECT event_id FROM webhook_events WHERE received_via = 'reconcile'")}
    timelines = system.rows("SELECT timeline_id, failover, first_seen_at "
                            "FROM database_timelines ORDER BY first_seen_at")
    # Each web process reads the database's figures at most every few seconds.
    wait_for(lambda: "webhooks_database_failovers_total 1.0" in requests.get(
        f"{system.base_url}/metrics", timeout=10).text, 30, "the failover on /metrics")

    print(f"\nfailover (asynchronous standby): {len(acked_before)} events acknowledged before "
          f"the kill, {len(lost)} of them lost with the old primary, {len(lost & came_back)} "
          f"came back by the reconciliation ({len(came_back)} recorded by it in all); "
          f"promotion took {done:.2f}s, the first 200 {first_200:.2f}s after it was asked "
          f"for; the stream's answers "
          f"{stream_statuses}, the slowest {slowest:.2f}s; reconciled "
          f"{reconciled_at.timestamp() - promoted:.1f}s after the promotion; "
          f"timelines {[(t.timeline_id, t.failover) for t in timelines]}; {counts}")
    assert lost <= came_back
    assert first_200 <= BACK_WITHIN
    assert set(stream_statuses) <= {200, 503}, provider.answers[:5]
    assert [t.failover for t in timelines] == [False, True]
    assert timelines[1].timeline_id == pair.timeline(pair.standby_url)
    assert (reconciled_at - timelines[1].first_seen_at).total_seconds() <= RECONCILED_WITHIN
    # Followed the new primary without a restart: no exit, the same processes.
    assert system.exits() == {}
    assert {s.name: s.process.pid for s in system.services if s.process} == pids


SWEEP_SECONDS = 60.0  # a clock that sweeps every minute: the window it leaves is that long
RECEIPTS, AFTER = 20, 8


@pytest.fixture()
def slow_clock(request: pytest.FixtureRequest) -> Iterator[tuple[System, ReplicatedPostgres]]:
    # No API credentials: nothing is reconciled; only the dispatcher's search can help.
    with replicated_system(request, synchronous=False,
                           SWEEP_INTERVAL_SECONDS=str(int(SWEEP_SECONDS))) as pair:
        yield pair


def test_no_receipt_twice_before_the_clock_sweeps(  # type: ignore[no-untyped-def]
        slow_clock) -> None:
    """SPEC "After a failover": the dispatcher does not wait for the clock to notice. An
    asynchronous standby has a batch of paid invoices and their pending jobs, but not
    what the old primary did with them after it was detached: the jobs applied, the
    receipts sent (the fake Postmark has them) and marked. The primary is killed with -9
    right after a sweep of a clock sweeping every SWEEP_SECONDS, and the standby promoted.
    New deliveries then reach the workers on the new primary, whose batch claims re-apply
    the old jobs (oldest first), re-creating the receipts at their first attempt, and the
    workers dispatch them at once, before the clock's next sweep records the new
    timeline. Each key must still reach Postmark once: the claim sees that its server's
    timeline has no row yet, and searches first."""
    system, pair = slow_clock
    world = World(rng=random.Random(8010))
    before, after = invoices(world, RECEIPTS), invoices(world, AFTER)
    wait_for(lambda: system.scalar("SELECT count(*) FROM database_timelines") == 1, 60,
             "the first timeline recorded")

    with system.held(*system.workers):  # recorded and replicated, not yet applied
        answers = senders.send(system.base_url, senders.spread(before, 4, rate=RATE))
        assert checks.statuses(answers) == {200: len(answers)}
        pair.wait_replayed()
        pair.detach_standby()
    system.settle()  # the workers apply them and send the receipts, on the primary alone
    receipts = {key for key in world.emails if system.scalar(
        "SELECT count(*) FROM outbox WHERE idempotency_key = :key", key=key)}
    assert len(receipts) == RECEIPTS
    assert set(system.postmark_messages()["by_key"]) == receipts

    # Right after a sweep: the clock's next look at the timeline is SWEEP_SECONDS away.
    beat = system.scalar("SELECT beat_at FROM clock_heartbeats WHERE name = :name",
                         name=SWEEP_HEARTBEAT)
    wait_for(lambda: system.scalar("SELECT beat_at FROM clock_heartbeats WHERE name = :name",
                                   name=SWEEP_HEARTBEAT) != beat,
             SWEEP_SECONDS + 30, "the clock's next sweep", interval=0.1)
    pair.kill_primary()
    promoted = time.time()
    pair.promote()
    assert system.scalar("SELECT count(*) FROM outbox") == 0  # the standby never had them
    provider = RetryingProvider(system.base_url, after)
    provider.start()
    provider.join(SWEEP_SECONDS)
    assert not provider.is_alive(), "the deliveries after the promotion were not acknowledged"
    keys = sorted(receipts)
    wait_for(lambda: system.scalar("SELECT count(*) FROM outbox WHERE status = 'sent' AND "
                                   "idempotency_key = ANY(:keys)", keys=keys) == RECEIPTS,
             SWEEP_SECONDS, "the old receipts sent again on the new primary", interval=0.25)
    resent = time.time() - promoted
    # Done before the clock recorded the new timeline: the window this test is about.
    late = system.scalar(
        "SELECT count(*) FROM outbox WHERE idempotency_key = ANY(:keys) AND sent_at >= "
        "coalesce((SELECT min(first_seen_at) FROM database_timelines WHERE failover), "
        "'infinity')", keys=keys)
    by_key = system.postmark_messages()["by_key"]
    twice = sorted(key for key, count in by_key.items() if count > 1)
    print(f"\nreceipts after a failover, before the clock's sweep: {len(receipts)} sent by "
          f"the old primary, their marks lost; {len(twice)} sent twice; their rows done "
          f"{resent:.1f}s after the promotion, {late} of them after the clock recorded "
          f"the new timeline")
    assert late == 0, "the clock swept first: the window was not exercised"
    assert twice == []
    # A job message that met a connection to the old primary waits for a sweep, and each
    # of the clock's pooled connections to the old primary fails one tick first.
    system.settle(timeout=5 * SWEEP_SECONDS)
    checks.assert_exactly_once(system, world)
    assert system.exits() == {}


ANSWER_BOUND = 10.0  # SPEC.md "Failover": 503, never a hang past 10 s


def test_a_failover_to_a_synchronous_standby_loses_no_acknowledged_event(  # type: ignore[no-untyped-def]
        synchronous) -> None:
    """Guarantee 8, synchronous half: every delivery answered 200 is on the promoted
    standby with nothing reconciled (no API credentials), a standby that stops answering
    gets deliveries 503s within 10 s and never a 200, and everything applies once."""
    system, pair = synchronous
    world = World(rng=random.Random(8009))
    first, frozen, stream = (invoices(world, n) for n in (FIRST, 3, STREAM))
    answers = senders.send(system.base_url, senders.spread(first, 4, rate=RATE))
    assert checks.statuses(answers) == {200: len(answers)}

    pair.freeze_standby()
    try:
        with requests.Session() as session:
            stalled = [senders.post(session, system.base_url, index, event)
                       for index, event in enumerate(frozen)]
    finally:
        pair.thaw_standby()
    assert [a.status for a in stalled] == [503] * len(frozen), stalled
    stalled_for = max(a.ended - a.started for a in stalled)
    assert stalled_for < ANSWER_BOUND

    provider = RetryingProvider(system.base_url, frozen + stream)
    provider.start()
    time.sleep(2)
    pair.kill_primary()
    killed = time.time()
    time.sleep(1)
    promoted = time.time()
    pair.promote()
    # What the promoted standby had, before anything else could write: nothing but the
    # old primary's replicated commits (the processes' new writes are deliveries too, so
    # read them all and compare with what was acknowledged before the kill).
    on_standby = {row.event_id for row in system.rows("SELECT event_id FROM webhook_events")}
    provider.join(300)
    assert not provider.is_alive(), "the stream was not acknowledged"

    acked_before = acknowledged(answers + stalled + provider.answers, before=killed)
    lost = acked_before - on_standby
    back = [a.ended - promoted for a in provider.answers if a.status == 200 and a.ended > killed]
    stream_statuses = checks.statuses(provider.answers)
    slowest = max(a.ended - a.started for a in provider.answers)
    system.settle()
    counts = checks.assert_exactly_once(system, world)
    print(f"\nfailover (synchronous standby): {len(acked_before)} events acknowledged before "
          f"the kill, {len(lost)} lost; a frozen standby's deliveries answered 503 within "
          f"{stalled_for:.2f}s; the first 200 {min(back):.2f}s after the promotion was asked "
          f"for; the stream's answers {stream_statuses}, the slowest {slowest:.2f}s; {counts}")
    assert not lost, sorted(lost)[:5]
    assert min(back) <= BACK_WITHIN
    assert set(stream_statuses) <= {200, 503}, provider.answers[:5]
    assert slowest < ANSWER_BOUND
    assert system.exits() == {}
