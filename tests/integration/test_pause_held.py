"""A paused backlog is held: out of the range of the pending index that the claims read
(jobs.held), set at pause, at recording while paused, at replay; cleared at resume, oldest
first. The paused-source anti-join stays the guarantee: a job the pause missed (recorded as
it committed) is never claimed, and the sweeper holds it; a job a resume missed is released
by the sweeper. Real Postgres, two connections racing."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories
from webhooks.clock.sweep import sweep
from webhooks.shared import db, handlers, pausing, queries, recording, wakeups
from webhooks.shared.settings import Settings
from webhooks.worker import jobs


@pytest.fixture()
def broker(settings: Settings) -> Iterator[object]:
    created = wakeups.create_broker(settings)
    yield created
    created.close()


def job_of(engine: Engine, provider: str, n: int, source: str | None = None) -> int:
    event = factories.stripe_event("invoice.paid", factories.invoice(customer=f"cus_{n}"),
                                   event_id=f"evt_{provider}_{source}_{n}")
    return factories.insert_event_and_job(engine, event, provider=provider, source=source)


def held(engine: Engine) -> dict[int, bool]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("SELECT id, held FROM jobs")).all())


def due(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(queries.JobCountDue).scalar_one())


def insert(conn: sa.Connection, n: int) -> int:
    """EventJobInsert, the ingest's and reconciliation's statement, for a Stripe event, in
    the caller's transaction."""
    event = factories.stripe_event("invoice.paid", factories.invoice(customer=f"cus_{n}"),
                                   event_id=f"evt_raced_{n}")
    job_id: int = conn.execute(queries.EventJobInsert, {
        "provider": "stripe", "source": "stripe", "event_id": event["id"],
        "event_type": event["type"], "payload": json.dumps(event), "received_via": "delivery",
        "body_sha256": None, "account": None, "livemode": None,
        "trace_context": None}).scalar_one()
    return job_id


def test_pause_holds_the_backlog_and_resume_releases_it_oldest_first(  # type: ignore[no-untyped-def]
        clean_db, settings) -> None:
    handlers.load(settings)
    stripe = [job_of(clean_db, "stripe", n) for n in range(4)]
    github = [job_of(clean_db, "github", n) for n in range(2)]
    pausing.pause(clean_db, "stripe")
    assert held(clean_db) == {**{j: True for j in stripe}, **{j: False for j in github}}
    # Recorded while paused: held at its insert.
    with clean_db.begin() as conn:
        late = insert(conn, 99)
    # Replayed while paused: held too.
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'failed', held = false WHERE id = :id"),
                     {"id": stripe[0]})
        conn.execute(queries.JobReplay, {"ids": [stripe[0]]})
    assert held(clean_db)[late] is True and held(clean_db)[stripe[0]] is True
    assert jobs.process_batch(clean_db, settings, limit=50).claimed == 2
    # Resuming one source of a paused provider releases nothing: the provider's pause holds.
    pausing.pause(clean_db, "stripe", "stripe")
    assert pausing.resume(clean_db, "stripe", "stripe") == 0
    assert held(clean_db)[late] is True
    assert pausing.resume(clean_db, "stripe") == 5
    assert not any(held(clean_db).values())
    jobs.process_batch(clean_db, settings, limit=50)
    with clean_db.connect() as conn:
        order = conn.execute(sa.text("SELECT id FROM jobs WHERE provider = 'stripe' "
                                     "ORDER BY finished_at, id")).scalars().all()
    assert order == sorted([*stripe, late])  # oldest first


def test_a_job_recorded_as_the_pause_commits_is_never_claimed(  # type: ignore[no-untyped-def]
        clean_db, settings, broker) -> None:
    """Connection A records a Stripe event (its insert sees no pause: not held) and has not
    committed when connection B pauses Stripe, whose batches cannot see A's row. A
    commits: the job is pending, unheld, its provider paused. The anti-join keeps it
    unclaimed and not due; the next sweep holds it."""
    handlers.load(settings)
    with clean_db.connect() as recorder:
        with recorder.begin():
            raced = insert(recorder, 1)
            assert pausing.pause(clean_db, "stripe") is True
        assert held(clean_db)[raced] is False  # missed by the pause, as the race leaves it
        assert due(clean_db) == 0
        assert jobs.process_batch(clean_db, settings, limit=50).claimed == 0
        with clean_db.connect() as conn:  # a wake-up naming the job claims it no more
            assert conn.execute(queries.JobClaimById, {"id": raced}).first() is None
        sweep(clean_db, broker)
        assert held(clean_db)[raced] is True
        assert pausing.resume(clean_db, "stripe") == 1
        assert jobs.process_batch(clean_db, settings, limit=50).claimed == 1


def test_a_job_recorded_as_the_resume_commits_is_released_by_the_sweeper(  # type: ignore[no-untyped-def]
        clean_db, settings, broker) -> None:
    """Connection A records a Stripe event while Stripe is paused (held at its insert) and
    has not committed when connection B resumes Stripe, whose release cannot see A's row.
    A commits: held, its provider not paused. The next sweep releases it; it runs."""
    handlers.load(settings)
    pausing.pause(clean_db, "stripe")
    with clean_db.connect() as recorder:
        with recorder.begin():
            raced = insert(recorder, 2)
            assert pausing.resume(clean_db, "stripe") == 0
        assert held(clean_db)[raced] is True
    assert jobs.process_batch(clean_db, settings, limit=50).claimed == 0
    result = sweep(clean_db, broker)
    assert result is not None and result.due_jobs == 1
    assert held(clean_db)[raced] is False
    assert jobs.process_batch(clean_db, settings, limit=50).claimed == 1


def test_racing_pauses_and_resumes_against_recordings_one_sweep_repairs_every_race(  # type: ignore[no-untyped-def]
        clean_db, settings, broker) -> None:
    """Recordings through the ingest's path from two threads while a third pauses and
    resumes Stripe as fast as it can and a fourth claims and completes jobs (its locks
    skipped by the pauses' batches): ended on a pause, one sweep leaves no pending Stripe
    job unheld; resumed, one sweep leaves none held."""
    handlers.load(settings)
    ingest = db.create_engine(settings, pool_size=2, autocommit=True)
    stop, stop_toggling = threading.Event(), threading.Event()

    def record(worker: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            event = factories.stripe_event("invoice.paid", factories.invoice(customer=f"c{n}"),
                                           event_id=f"evt_{worker}_{n}")
            recording.record_event(ingest, "stripe", event["id"], event["type"],
                                   json.dumps(event).encode())

    def toggle() -> None:
        while not stop_toggling.is_set():
            pausing.pause(clean_db, "stripe")
            pausing.resume(clean_db, "stripe")

    def claim() -> None:
        with clean_db.connect() as conn:
            while not stop.is_set():
                with conn.begin():
                    claimed = conn.execute(queries.JobClaimDue, {"limit": 20}).all()
                    conn.execute(sa.text("UPDATE jobs SET status = 'done', "
                                         "finished_at = now() WHERE id = ANY(:ids)"),
                                 {"ids": [row.id for row in claimed]})

    toggler = threading.Thread(target=toggle)
    others = [threading.Thread(target=record, args=(w,)) for w in range(2)]
    others.append(threading.Thread(target=claim))
    for thread in [toggler, *others]:
        thread.start()
    try:
        time.sleep(3)
    finally:
        stop_toggling.set()
        toggler.join(timeout=30)
        pausing.pause(clean_db, "stripe")  # while the recordings go on
        time.sleep(0.2)
        stop.set()
        for thread in others:
            thread.join(timeout=30)
        ingest.dispose()
    sweep(clean_db, broker)
    with clean_db.connect() as conn:
        counts = dict(conn.execute(sa.text(
            "SELECT held, count(*) FROM jobs WHERE status = 'pending' GROUP BY held")).all())
        total = conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar_one()
    assert total > 50 and counts.get(False, 0) == 0 and counts.get(True, 0) > 0
    assert due(clean_db) == 0
    pausing.resume(clean_db, "stripe")
    sweep(clean_db, broker)
    assert not any(held(clean_db).values())
