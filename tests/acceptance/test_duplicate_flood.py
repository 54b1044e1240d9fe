"""Guarantee 1 (docs/guarantees.md): every acknowledged event applied exactly once, however
many times and however concurrently it is delivered, from however many processes; and the
same through a pooler in transaction mode (docs/several-hosts.md, "Behind a pooler")."""

from __future__ import annotations

import random
import time

from tests.acceptance import checks, senders
from tests.acceptance.harness import System
from tests.acceptance.senders import Answer
from tests.acceptance.world import World

BULK_EVENTS = 560  # each delivered 1 to 5 times: ~1700 deliveries
BULK_SENDERS = 8
HOT_COPIES = 30  # these events: 30 copies at the same instant, from 30 processes


def test_duplicate_flood_applies_each_event_once(fresh: System) -> None:
    flood(fresh)


def test_duplicate_flood_through_a_transaction_pooler(fresh_pooled: System) -> None:
    """The same, with web, worker and clock behind PgBouncer in transaction mode
    (DATABASE_POOLER=transaction; harness.System's `pooled`)."""
    before = checks.pooled_transactions(fresh_pooled)
    answers = flood(fresh_pooled)
    checks.assert_through_the_pooler(fresh_pooled, before, at_least=len(answers))


def flood(system: System) -> list[Answer]:
    world = World(rng=random.Random(7001))
    hot = [*world.invoice(), *world.invoice(), *world.refunds_of_charge(2),
           *world.subscription_history()[:1], *world.payment_failed(),
           *world.other_provider("github"), *world.other_provider("standard")]
    world.mixed(BULK_EVENTS + len(hot))
    bulk = world.deliveries([e for e in world.events if e not in hot], 1, 5)
    # Bursts land while the bulk flows: the two events of one invoice (paid and
    # payment_succeeded) are next to each other, so both race across processes too.
    plans = [*senders.spread(bulk, BULK_SENDERS),
             *senders.bursts(hot, HOT_COPIES, first_index=len(bulk), gap=0.4)]

    started = time.monotonic()
    answers = senders.send(system.base_url, plans)
    sending = time.monotonic() - started
    settling = system.settle()

    assert checks.statuses(answers) == {200: len(answers)}, [
        a for a in answers if a.status != 200][:5]
    checks.assert_one_first_delivery(answers)
    hot_keys = {event.key for event in hot}
    copies = [sum(a.key == key for a in answers) for key in hot_keys]
    assert copies == [HOT_COPIES] * len(hot_keys)
    counts = checks.assert_exactly_once(system, world)
    path = "through PgBouncer" if system.pgbouncer is not None else "direct"
    print(f"\nduplicate flood ({path}): {len(answers)} deliveries ({len(bulk)} bulk from "
          f"{BULK_SENDERS} processes, {len(hot)} events x {HOT_COPIES} at once from "
          f"{HOT_COPIES} processes) of {len(world.events)} events in {sending:.1f}s, "
          f"settled {settling:.1f}s later; {counts}")
    return answers
