"""The schedules `webhooks check-handlers` runs events under: what providers and this
system really produce (docs/testing-your-app.md says why each happens). A schedule is drawn
by Hypothesis, which also shrinks a failing one to the shortest it can find:

- every event is delivered 1 to 3 times: its first delivery near its place (the events of
  one moment arrive in any order), its retries any time after (providers retry for hours
  and do not order deliveries); a copy may be two deliveries at once, from two
  connections (a retry racing the original), or a reconciliation and a delivery at once
  (the clock listing an event whose delivery is arriving);
- after any delivery, the jobs due may be run: by one batch after another, or by two
  batches at once, from two connections, whose handlers are held until both have run
  (two workers applying two events of one object at the same moment);
- an event's job may fail once inside its batch, after its handlers ran: the batch rolls
  back and its jobs rerun one at a time (the handlers' first runs are rolled back, what
  they kept outside the transaction is not);
- an event's handlers may raise on every attempt: its job is failed, then replayed.

Whatever the schedule, the system ends it with every job done: the jobs still due are
drained, the failed ones replayed and drained.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING

from webhooks.testing.events import Event
from webhooks.testing.kit import Kit

if TYPE_CHECKING:  # Hypothesis is the testing extra's: imported where schedules are drawn
    from hypothesis import strategies as st


class How(StrEnum):
    """How one copy of an event reaches the system."""

    ONCE = "delivered"
    TWICE_AT_ONCE = "delivered twice at once, from two connections"
    WITH_RECONCILIATION = "recorded by reconciliation and delivered at once"


class Drain(StrEnum):
    """How the jobs due are run after a delivery (none: they wait)."""

    NONE = "none"
    BATCHES = "the jobs due run, batch after batch"
    TWO_AT_ONCE = "two batches at once, their handlers overlapping"


@dataclass(frozen=True)
class Copy:
    event: int  # its index in the events
    how: How
    then: Drain
    lead: int = 0  # two batches at once: the jobs run alone first (how the pairs fall)


@dataclass(frozen=True)
class Schedule:
    copies: tuple[Copy, ...]
    fail_in_batch: frozenset[int] = frozenset()
    fail_then_replay: frozenset[int] = frozenset()
    last: Drain = Drain.BATCHES  # how the jobs still due run at the end
    last_lead: int = 0

    def __len__(self) -> int:
        """Its size, for the shortest: copies, drains and faults."""
        return (len(self.copies) + sum(copy.then is not Drain.NONE for copy in self.copies)
                + len(self.fail_in_batch) + len(self.fail_then_replay)
                + (self.last is Drain.TWO_AT_ONCE))

    def size(self) -> tuple[int, int, int]:
        """How far from the reference, for the simplest: its steps, then its copies not
        plainly delivered, then those out of the events' order."""
        highest, out_of_order = -1, 0
        for copy in self.copies:
            out_of_order += copy.event < highest
            highest = max(highest, copy.event)
        return len(self), sum(copy.how is not How.ONCE for copy in self.copies), out_of_order

    def lines(self, events: list[Event]) -> list[str]:
        """The schedule as numbered steps, for a report."""
        steps = [f"the job of {events[i]} fails once in its batch, after its handlers ran "
                 "(the batch rolls back, its jobs rerun one at a time)"
                 for i in sorted(self.fail_in_batch)]
        steps += [f"the handlers of {events[i]} raise on every attempt: its job fails, "
                  "then is replayed" for i in sorted(self.fail_then_replay)]
        for copy in self.copies:
            steps.append(f"{events[copy.event]} {copy.how}")
            if copy.then is not Drain.NONE:
                steps.append(_drain_line(copy.then, copy.lead))
        steps.append(f"at the end, {_drain_line(self.last, self.last_lead)}; the failed "
                     "jobs are replayed and run")
        return [f"{number}. {step}" for number, step in enumerate(steps, 1)]


def _drain_line(drain: Drain, lead: int) -> str:
    if drain is Drain.TWO_AT_ONCE and lead:
        return f"{drain} (after {lead} job alone)"
    return str(drain)


# How far from its place in the events a first delivery may land (a provider sends the
# events of one moment in any order), and how late a retry may come (any time after).
NEARBY = 3


def schedules(count: int) -> st.SearchStrategy[Schedule]:
    """Schedules of `count` events; each part shrinks towards the reference's (one copy
    of each, in order, delivered once, nothing run before the end, no fault). A first
    delivery lands near its event's place, a retry anywhere after it: the order of
    deliveries real providers produce (the events of one moment swapped, retries late)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(data: st.DrawFn) -> Schedule:
        placed = []
        for index in range(count):
            first = 2 * index + data(st.integers(-NEARBY, NEARBY))
            placed.append((first, index, 0))
            for retry in range(1, data(st.integers(1, 3))):
                placed.append((first + data(st.integers(0, 2 * count)), index, retry))
        made = tuple(Copy(index, data(st.sampled_from(How)), data(st.sampled_from(Drain)),
                          data(st.integers(0, 1)))
                     for _, index, _ in sorted(placed))
        faults = st.sets(st.integers(0, count - 1), max_size=max(1, count // 5))
        fail_in_batch = frozenset(data(faults))
        fail_then_replay = frozenset(data(faults)) - fail_in_batch
        last = data(st.sampled_from([Drain.BATCHES, Drain.TWO_AT_ONCE]))
        return Schedule(made, fail_in_batch, fail_then_replay, last, data(st.integers(0, 1)))

    return draw()


def simplifications(schedule: Schedule) -> Iterator[Schedule]:
    """Each schedule one part simpler than `schedule`: a fault dropped, a retry dropped
    (an event keeps one copy), a copy delivered once or run by nothing after it, every
    copy in the events' order, the end's drain one batch after another."""
    for index in sorted(schedule.fail_in_batch):
        yield replace(schedule, fail_in_batch=schedule.fail_in_batch - {index})
    for index in sorted(schedule.fail_then_replay):
        yield replace(schedule, fail_then_replay=schedule.fail_then_replay - {index})
    copies = schedule.copies
    seen: set[int] = set()
    for position, copy in enumerate(copies):
        if copy.event in seen:
            yield replace(schedule, copies=copies[:position] + copies[position + 1:])
        seen.add(copy.event)
    in_order = tuple(sorted(copies, key=lambda copy: copy.event))
    if in_order != copies:
        yield replace(schedule, copies=in_order)
    for position, copy in enumerate(copies):
        if copy.then is not Drain.NONE:
            plain = replace(copy, then=Drain.NONE, lead=0)
            yield replace(schedule, copies=(*copies[:position], plain, *copies[position + 1:]))
    for position, copy in enumerate(copies):
        if copy.how is not How.ONCE:
            plain = replace(copy, how=How.ONCE)
            yield replace(schedule, copies=(*copies[:position], plain, *copies[position + 1:]))
    if schedule.last is not Drain.BATCHES:
        yield replace(schedule, last=Drain.BATCHES, last_lead=0)


def run(kit: Kit, events: list[Event], schedule: Schedule) -> None:
    """The schedule, on an emptied database."""
    kit.reset()
    for index in schedule.fail_in_batch:
        kit.fail(events[index], 1)
    for index in schedule.fail_then_replay:
        kit.fail(events[index])
    for copy in schedule.copies:
        event = events[copy.event]
        if copy.how is How.ONCE:
            kit.deliver(event)
        elif copy.how is How.TWICE_AT_ONCE:
            kit.at_once(partial(kit.deliver, event), partial(kit.deliver, event))
        else:
            kit.at_once(partial(kit.reconcile, event), partial(kit.deliver, event))
        _drain(kit, copy.then, copy.lead)
    _drain(kit, schedule.last, schedule.last_lead)
    kit.drain()
    if kit.replay_failed():
        kit.drain()


def _drain(kit: Kit, drain: Drain, lead: int) -> None:
    if drain is Drain.BATCHES:
        kit.drain()
    elif drain is Drain.TWO_AT_ONCE:
        kit.two_batches(lead)


def reference(kit: Kit, events: list[Event]) -> None:
    """Each event once, in order, each job run before the next delivery."""
    kit.reset()
    for event in events:
        kit.deliver(event)
        kit.drain()
