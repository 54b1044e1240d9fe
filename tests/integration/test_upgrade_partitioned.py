"""Migration 0023 (events, jobs and search documents partitioned by day; the dedup keys in
webhook_dedup) on a database of the previous release (revision 0022), run as a release
phase runs it: while the previous release's web keeps recording deliveries, and the new
release's web records them too once the switch is committed.

The previous release's web is its own statements, verbatim (benchmarks/upgrade.py keeps
them, copied from `git show 895c865:shared/queries.py`, and its recording logic,
`previous_record`): events new to both webs, the same new event from two threads at once
(from both webs after the switch), redeliveries of the events recorded before the upgrade,
and their bodies re-sent under new ids (GitHub, Shopify). Each step of the migration
starts after a pause, so deliveries are in flight through every one of them.

Then: every acknowledged delivery's event is one row with one job; no event is recorded
twice; no delivery failed (each would have been a 503); a redelivery is answered with the
job of the event it repeats and that job's status, through either web; every event
recorded before the upgrade has its keys in webhook_dedup; the new worker's claim finds
the jobs left pending by the previous release; the schema is the one the code declares.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchmarks import migration_locks
from benchmarks.previous_release import previous_record
from benchmarks.upgrade import (
    BEFORE,
    STEPS,
    CheckDuplicates,
    CheckWithoutJob,
    CheckWithoutKey,
    MigrationSteps,
    load_previous,
    upgrade,
)
from tests.conftest import migrate
from webhooks import migrate as migrations
from webhooks.shared import audit, db, queries
from webhooks.shared.errors import DatabaseUnavailable
from webhooks.shared.recording import Origin, RecordingResult, record_event
from webhooks.shared.settings import Settings

EVENTS = 4_000  # recorded before the upgrade: several backfill batches
BACKFILL_BATCH = 500
STEP_PAUSE = 0.3  # seconds before each step of the migration: deliveries land in each
AFTER_SWITCH = 1.0  # seconds of deliveries once the switch is committed
TYPES = {"stripe": "invoice.paid", "github": "push", "shopify": "orders/create",
         "standard": "user.created"}
# SQLSTATEs of failures the web answers 503 to, for the provider to retry: lock timeout,
# serialization failure, deadlock (with DatabaseUnavailable: the ingest's deadline passed).
RETRIED_LATER = ("55P03", "40001", "40P01")


@dataclass(frozen=True)
class Event:
    provider: str
    source: str
    event_id: str
    event_type: str
    body: bytes


@dataclass(frozen=True)
class Answer:
    """One delivery: what it sent, through which web, when, and what it was answered."""

    kind: str  # "race", "new", "again" (a loaded event), "minted" (its body, a new id)
    web: str  # "previous" or "current"
    event: Event
    started: float
    ended: float
    result: RecordingResult | None
    error: BaseException | None


Web = Callable[[Event], RecordingResult]


@dataclass(frozen=True)
class Loaded:
    """An event recorded before the upgrade and its job."""

    event: Event
    job_id: int
    status: str


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar_one()


def new_event(provider: str, event_id: str) -> Event:
    source = "clerk" if provider == "standard" else provider
    body = json.dumps({"id": event_id, "provider": provider}).encode()
    return Event(provider, source, event_id, TYPES[provider], body)


class Deliveries:
    """Threads delivering until stop(), every answer (or failure) kept in `answers`."""

    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def run(self, kind: str, webs: Callable[[], tuple[str, Web]],
            events: Iterator[Event], barrier: threading.Barrier | None = None) -> None:
        """A thread delivering `events` in turn through the web webs() names at each
        delivery; with `barrier`, each delivery starts with the other threads' at once."""
        def deliver() -> None:
            for event in events:
                if self._stop.is_set():
                    break
                if barrier is not None:
                    try:
                        barrier.wait(timeout=30)
                    except threading.BrokenBarrierError:
                        break
                name, web = webs()
                started, result, error = time.monotonic(), None, None
                try:
                    result = web(event)
                except Exception as failure:
                    error = failure
                self.answers.append(Answer(kind, name, event, started, time.monotonic(),
                                           result, error))

        thread = threading.Thread(target=deliver, daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self, *barriers: threading.Barrier) -> None:
        self._stop.set()
        for barrier in barriers:
            barrier.abort()
        for thread in self._threads:
            thread.join(30)


@pytest.fixture()
def previous_database(fresh_database: tuple[str, Engine]) -> tuple[str, Engine, list[Loaded]]:
    """The previous release's schema with EVENTS events and their jobs (pending, done,
    failed; GitHub's and Shopify's with their body digests; Standard Webhooks' ids from
    two sources), search documents and duplicate records."""
    url, engine = fresh_database
    migration_locks.upgrade(url, BEFORE)
    loader = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    load_previous(loader, EVENTS)
    loader.dispose()
    with engine.connect() as conn:
        rows = conn.execute(sa.text("""
            SELECT e.provider, e.source, e.event_id, e.event_type, e.payload::text, j.id,
                   j.status
            FROM webhook_events e JOIN jobs j USING (provider, source, event_id)
            WHERE e.id % 10 < 3 ORDER BY e.id""")).all()
    loaded = [Loaded(Event(r[0], r[1], r[2], r[3], r[4].encode()), r[5], r[6]) for r in rows]
    assert {item.status for item in loaded} == {"pending", "done", "failed"}
    return url, engine, loaded


def races() -> Iterator[Event]:
    for k in count():
        yield new_event(tuple(TYPES)[k % len(TYPES)], f"race-{k}")


def news(name: str) -> Iterator[Event]:
    for k in count():
        yield new_event(tuple(TYPES)[k % len(TYPES)], f"new-{name}-{k}")


def again(loaded: list[Loaded]) -> Iterator[Event]:
    while True:
        yield from (item.event for item in loaded)


def minted(loaded: list[Loaded]) -> Iterator[Event]:
    """The loaded GitHub and Shopify bodies under new ids: a captured delivery re-sent."""
    while True:
        for item in loaded:
            if item.event.provider in ("github", "shopify"):
                yield Event(item.event.provider, item.event.source,
                            f"minted-{item.event.event_id}", item.event.event_type,
                            item.event.body)


def deliver_through_the_upgrade(url: str, loaded: list[Loaded]) -> tuple[MigrationSteps,
                                                                          list[Answer]]:
    """0023 run while threads deliver: through the previous web from the start, through
    the current web too once the switch is committed, AFTER_SWITCH seconds more."""
    settings = Settings.from_env({"DATABASE_URL": url})
    previous_engine = db.create_engine(settings, pool_size=4, autocommit=True)
    current_engine = db.create_engine(settings, pool_size=4, autocommit=True)
    switched = threading.Event()

    def previous() -> tuple[str, Web]:
        return "previous", lambda event: previous_record(
            previous_engine, event.provider, event.event_id, event.event_type, event.body,
            event.source)

    def current() -> tuple[str, Web]:
        return "current", lambda event: record_event(
            current_engine, event.provider, event.event_id, event.event_type, event.body,
            origin=Origin(source=event.source))

    steps = MigrationSteps(pause=STEP_PAUSE)
    deliveries = Deliveries()
    pair = threading.Barrier(2)
    # The same new event from two threads at once: both the previous web's until the
    # switch, then one of them the current web's.
    deliveries.run("race", previous, races(), pair)
    deliveries.run("race", lambda: current() if switched.is_set() else previous(), races(),
                   pair)
    deliveries.run("new", previous, news("previous"))
    deliveries.run("again", previous, again(loaded))
    deliveries.run("minted", previous, minted(loaded))
    try:
        upgrade(url, steps, backfill_batch=BACKFILL_BATCH)
        switched.set()
        deliveries.run("new", current, news("current"))
        deliveries.run("again", current, again(loaded))
        deliveries.run("minted", current, minted(loaded))
        time.sleep(AFTER_SWITCH)
    finally:
        deliveries.stop(pair)
        previous_engine.dispose()
        current_engine.dispose()
    return steps, deliveries.answers


def assert_none_failed(steps: MigrationSteps, answers: list[Answer]) -> None:
    """Every delivery was acknowledged; the failures a provider retries after a 503 (the
    window the upgrade would have) are counted apart from the others."""
    failed = [(a, a.error) for a in answers if a.error is not None]
    retried = [a for a, error in failed if db.sqlstate(error) in RETRIED_LATER
               or isinstance(error, DatabaseUnavailable)]
    assert not failed, (
        f"{len(failed)} of {len(answers)} deliveries failed, {len(retried)} of them on a lock "
        f"timeout, a serialization failure, a deadlock or the deadline (a 503 window): "
        f"{[(a.kind, a.web, steps.step_at(a.started), repr(e)) for a, e in failed[:5]]}")


def assert_in_flight_throughout(steps: MigrationSteps, answers: list[Answer]) -> None:
    """The previous web delivered during every step, and both webs after the switch."""
    assert steps.ended is not None
    starts = [*steps.started.values(), steps.ended]
    for step, begun, over in zip(STEPS, starts[:-1], starts[1:], strict=True):
        assert [a for a in answers if a.web == "previous" and a.started < over
                and a.ended > begun], f"no delivery during the step {step}"
    after = {(a.kind, a.web) for a in answers if a.started > steps.ended}
    assert {("race", "current"), ("race", "previous"), ("new", "current"),
            ("again", "current"), ("minted", "current"), ("again", "previous")} <= after


def assert_recorded_once(engine: Engine, answers: list[Answer]) -> None:
    """One row and one job (of its day) for every new event acknowledged, none for a
    re-sent body; no event recorded twice, none without its job."""
    acknowledged = {(a.event.provider, a.event.source, a.event.event_id)
                    for a in answers if a.kind in ("race", "new")}
    with engine.connect() as conn:
        stored = {(r[0], r[1], r[2]): (r[3], r[4]) for r in conn.execute(sa.text("""
            SELECT e.provider, e.source, e.event_id, count(DISTINCT e.id), count(j.id)
            FROM webhook_events e LEFT JOIN jobs j ON j.provider = e.provider
                AND j.source = e.source AND j.event_id = e.event_id
                AND j.created_at = e.received_at
            WHERE e.event_id LIKE ANY (ARRAY['race-%', 'new-%', 'minted-%'])
            GROUP BY 1, 2, 3""")).all()}
    assert set(stored) == acknowledged
    assert set(stored.values()) == {(1, 1)}
    assert scalar(engine, CheckDuplicates) == 0
    assert scalar(engine, CheckWithoutJob) == 0
    assert scalar(engine, "SELECT count(*) FROM jobs") == scalar(
        engine, "SELECT count(*) FROM webhook_events")
    # A race: one delivery made the event, the other was answered with its job.
    by_race: dict[str, list[RecordingResult]] = {}
    for a in answers:
        if a.kind == "race" and a.result is not None:
            by_race.setdefault(a.event.event_id, []).append(a.result)
    raced = [results for results in by_race.values() if len(results) == 2]
    assert len(raced) > 20
    for results in raced:
        assert sorted(r.duplicate for r in results) == [False, True], results
        assert len({r.job_id for r in results}) == 1, results


def assert_answered_with_their_jobs(answers: list[Answer], loaded: list[Loaded]) -> None:
    """A redelivery of an event recorded before the upgrade is a duplicate answered with
    its job and that job's status; its body under a new id, with the event it repeats."""
    expected = {(item.event.provider, item.event.source, item.event.event_id): item
                for item in loaded}
    for a in answers:
        assert a.result is not None
        if a.kind == "again":
            item = expected[a.event.provider, a.event.source, a.event.event_id]
            assert (a.result.duplicate, a.result.job_id, a.result.status) == (
                True, item.job_id, item.status), (a.web, a.event, a.result)
        elif a.kind == "minted":
            original = a.event.event_id.removeprefix("minted-")
            assert a.result.duplicate and a.result.event_id == original, (a.web, a.result)
            assert a.result.job_id == expected[a.event.provider, a.event.source,
                                               original].job_id


def test_deliveries_through_both_webs_during_the_upgrade_are_recorded_once(
        previous_database: tuple[str, Engine, list[Loaded]]) -> None:
    url, engine, loaded = previous_database
    steps, answers = deliver_through_the_upgrade(url, loaded)

    assert_none_failed(steps, answers)
    assert_in_flight_throughout(steps, answers)
    assert_recorded_once(engine, answers)
    assert_answered_with_their_jobs(answers, loaded)

    # Every event of the previous release has its keys in webhook_dedup.
    assert scalar(engine, CheckWithoutKey) == 0
    assert scalar(engine, """
        SELECT count(*) FROM webhook_events e WHERE body_sha256 IS NOT NULL AND NOT EXISTS (
            SELECT FROM webhook_dedup d WHERE d.body_key = webhook_body_key(e.provider,
            e.event_type, e.body_sha256))""") == 0

    # The new worker claims the jobs the previous release left pending, with their events.
    pending = {item.job_id for item in loaded if item.status == "pending"}
    with engine.connect() as conn:
        claimed = conn.execute(queries.JobClaimDue, {"limit": 5}).all()
        conn.rollback()
    assert claimed and {row.id for row in claimed} <= pending
    assert all(json.loads(row.payload)["id"] for row in claimed)

    # The audit's event-job check holds; the schema is the code's.
    with engine.connect() as conn:
        assert not list(audit.event_jobs(conn, None))
        conn.rollback()
    migrate(url)  # the reference app's tables, as `webhooks migrate` adds them
    with engine.connect() as conn:
        assert migrations.check(conn, ("webhooks.ledger",)) == []
