"""The check: the events applied once each in order (the reference), then under schedules
(webhooks/testing/schedules.py) until one leaves the apps' tables or the emails queued
other than the reference did, an audit check finds a violation, or a handler opens a
network connection. The schedules are drawn from `seed`; a failing one is shortened by
Hypothesis, then one part at a time (_simpler), in SHRINK_RUNS runs, and reported with
the seed that draws it again.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from webhooks.testing import schedules
from webhooks.testing.events import Event
from webhooks.testing.kit import Kit, KitError, Reached, Snapshot, describe_rows
from webhooks.testing.schedules import Schedule

SCHEDULES = 50
SHRINK_RUNS = 80  # runs to shorten a failing schedule: a count, so a seed repeats a report
SHRINK_SECONDS = 120.0  # and a cap on their time (past it, a report may differ run to run)


@dataclass
class Failure:
    """What one run left that the reference did not."""

    differences: dict[str, tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]] = field(
        default_factory=dict)
    violations: list[str] = field(default_factory=list)
    reached: list[Reached] = field(default_factory=list)
    error: str | None = None

    def __bool__(self) -> bool:
        return bool(self.differences or self.violations or self.reached or self.error)


@dataclass
class Result:
    """A check's outcome: `failure` None when every schedule left what the reference left."""

    events: list[Event]
    seed: int
    schedules: int
    seconds: float
    columns: dict[str, tuple[str, ...]]
    ignored: list[str]
    failure: Failure | None = None
    schedule: Schedule | None = None  # the shortest failing schedule found (None: the reference)
    again: bool = False  # the reference's second run failed (state kept between jobs)

    @property
    def ok(self) -> bool:
        return self.failure is None

    def report(self) -> str:
        """What a person reads: the verdict, then for a failure the schedule, the seed and
        the rows side by side."""
        if self.failure is None:
            return (f"ok: {len(self.events)} events under {self.schedules} schedules left what "
                    f"applying each once, in order, left ({self.seconds:.1f} s, seed "
                    f"{self.seed}; compared {_compared(self.columns)}"
                    + (f"; left out: {', '.join(self.ignored)}" if self.ignored
                       else "") + ")")
        lines = []
        failure = self.failure
        if self.again:
            lines.append("FAILED applying each event once, in order, a second time in the same "
                         "process: the handlers keep state between jobs (a module's global, a "
                         "cache), and the same events leave other rows the second time:")
        elif self.schedule is None:
            lines.append("FAILED applying each event once, in order (the reference):")
        else:
            lines.append("FAILED under this schedule (the shortest found; "
                         f"`--seed {self.seed}` draws it again):")
            lines.extend("  " + line for line in self.schedule.lines(self.events))
        lines.extend(f"network: {reached}" for reached in _unique(failure.reached))
        lines.extend(f"audit: {violation}" for violation in failure.violations)
        if failure.error:
            lines.append(f"error: {failure.error}")
        for table, (theirs, reference) in failure.differences.items():
            columns = self.columns[table]
            lines.append(f"{table} ({', '.join(columns)}):")
            lines.append("  the reference left, and this schedule did not:")
            lines.extend(f"    {row}" for row in describe_rows(columns, reference) or ["(none)"])
            lines.append("  this schedule left, and the reference did not:")
            lines.extend(f"    {row}" for row in describe_rows(columns, theirs) or ["(none)"])
        return "\n".join(lines)


def check(kit: Kit, events: list[Event], *, schedules_count: int = SCHEDULES,
          seed: int | None = None, shrink_runs: int = SHRINK_RUNS,
          shrink_seconds: float = SHRINK_SECONDS) -> Result:
    """The reference, then up to `schedules_count` schedules drawn from `seed`. A failing
    schedule is made shorter in at most `shrink_runs` more runs (a count, so that a seed
    draws the same report again), within `shrink_seconds` whatever the count."""
    from hypothesis import HealthCheck, Phase, find  # the testing extra's
    from hypothesis import settings as hypothesis_settings
    from hypothesis.errors import NoSuchExample

    seed = random.SystemRandom().randrange(2**32) if seed is None else seed
    started = time.monotonic()
    result = Result(events, seed, schedules_count, 0.0, kit.columns, kit.left_out())
    expected, failure = _run(kit, lambda: schedules.reference(kit, events), None)
    if not failure:
        # The reference again, in the same process: handlers that keep state between jobs
        # (a module's global) apply the same events otherwise the second time.
        _, failure = _run(kit, lambda: schedules.reference(kit, events), expected)
        result.again = bool(failure)
    if failure:
        result.failure, result.seconds = failure, time.monotonic() - started
        return result
    found: dict[Schedule, Failure] = {}
    budget = _Budget(shrink_runs, shrink_seconds)

    def fails(schedule: Schedule) -> bool:
        budget.spend()
        _, failure = _run(kit, lambda: schedules.run(kit, events, schedule), expected)
        if failure:
            found[schedule] = failure
            budget.start()
        return bool(failure)

    try:
        find(schedules.schedules(len(events)), fails, random=random.Random(seed),
             settings=hypothesis_settings(
                 max_examples=schedules_count, database=None, deadline=None,
                 phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck)))
    except (NoSuchExample, _Enough):
        pass
    if found:
        budget.second_half()
        shortest = _simpler(min(found, key=Schedule.size), fails, budget)
        result.schedule, result.failure = shortest, found[shortest]
    result.seconds = time.monotonic() - started
    return result


class _Budget:
    """The runs left to shrink a failing schedule: half to Hypothesis's shrinking, the rest
    to _simpler's; none past the time cap."""

    def __init__(self, runs: int, seconds: float) -> None:
        self.runs, self.seconds = runs, seconds
        self.left: int | None = None  # None: no failure yet
        self.since = 0.0

    def start(self) -> None:
        if self.left is None:
            self.left, self.since = self.runs // 2, time.monotonic()

    def second_half(self) -> None:
        self.left = self.runs - self.runs // 2 + max(self.left or 0, 0)

    def spend(self) -> None:
        if self.left is None:
            return
        if self.left <= 0 or time.monotonic() - self.since > self.seconds:
            raise _Enough
        self.left -= 1


def _simpler(schedule: Schedule, fails: Any, budget: _Budget) -> Schedule:
    """The schedule made simpler one part at a time while it still fails, within the
    budget: each fault dropped, each retry dropped, each copy delivered plainly and run by
    nothing after it, the end's drain one batch after another. Hypothesis shrinks first;
    this pass takes what its shrinking left, one change per run."""
    for candidate in schedules.simplifications(schedule):
        if candidate.size() >= schedule.size():
            continue
        try:
            if fails(candidate):
                return _simpler(candidate, fails, budget)
        except _Enough:
            break
    return schedule


class _Enough(Exception):
    """Shrinking has had its time: the shortest failing schedule so far is reported."""


def _run(kit: Kit, steps: Any, expected: Snapshot | None) -> tuple[Snapshot | None, Failure]:
    failure = Failure()
    try:
        steps()
    except KitError as error:
        failure.error = str(error)
    failure.reached = list(kit.faults.reached)
    failed = kit.failed()
    if failed and failure.error is None:
        failure.error = f"{len(failed)} job(s) failed, replayed or not: " + "; ".join(failed[:3])
    failure.violations = kit.audit()
    snapshot = kit.snapshot()
    if expected is not None:  # by table: (rows only this run left, rows only the reference)
        failure.differences = {table: (theirs, reference) for table, (reference, theirs)
                               in expected.differences(snapshot).items()}
    return snapshot, failure


def _compared(columns: dict[str, tuple[str, ...]]) -> str:
    return "; ".join(f"{table} ({', '.join(names)})" for table, names in columns.items())


def _unique(reached: list[Reached]) -> list[Reached]:
    return list(dict.fromkeys(reached))
