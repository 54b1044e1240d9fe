"""Claiming and applying jobs against a real Postgres, with real concurrent connections."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories
from webhooks import JobContext
from webhooks.ledger.handlers import AccountLock
from webhooks.shared import handlers, queries
from webhooks.shared.settings import Settings
from webhooks.worker import jobs, retries


def scalar(engine: Engine, sql: str, **params: object) -> object:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar_one()


def job_row(engine: Engine, job_id: int):  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT * FROM jobs WHERE id = :id"), {"id": job_id}).one()


@pytest.fixture(autouse=True)
def _handlers(settings: Settings) -> None:
    handlers.load(settings)


def invoice_job(engine: Engine, amount: int = 1000, **invoice_kwargs: object) -> int:
    event = factories.stripe_event("invoice.paid", factories.invoice(amount=amount,
                                                                     **invoice_kwargs))
    return factories.insert_event_and_job(engine, event)


def test_two_connections_racing_for_one_job_exactly_one_wins(clean_db: Engine) -> None:
    job_id = invoice_job(clean_db)
    with clean_db.connect() as first, clean_db.connect() as second:
        first.begin()
        second.begin()
        a = first.execute(queries.JobClaimById, {"id": job_id}).all()
        b = second.execute(queries.JobClaimById, {"id": job_id}).all()  # SKIP LOCKED: no wait
        assert [r.id for r in a] == [job_id]
        assert b == []
        first.rollback()
        second.rollback()


def test_batch_claims_race_without_overlap(clean_db: Engine) -> None:
    ids = {invoice_job(clean_db, customer=f"cus_{i}") for i in range(30)}
    with clean_db.connect() as first, clean_db.connect() as second:
        first.begin()
        second.begin()
        a = {r.id for r in first.execute(queries.JobClaimDue, {"limit": 20})}
        b = {r.id for r in second.execute(queries.JobClaimDue, {"limit": 20})}
        assert len(a) == 20 and len(b) == 10
        assert not a & b and a | b == ids
        first.rollback()
        second.rollback()


def test_same_job_processed_twice_and_concurrently_applies_once(
    clean_db: Engine, settings: Settings
) -> None:
    job_ids = [invoice_job(clean_db, amount=100, customer="cus_same") for _ in range(20)]
    barrier = threading.Barrier(4)

    def worker() -> None:
        barrier.wait()
        for _ in job_ids:  # every job's wake-up delivered to every worker
            jobs.process_batch(clean_db, settings)
        deadline = time.monotonic() + 30
        # Then on, as the wake-ups that batches send carry them, until none is pending.
        while time.monotonic() < deadline and scalar(
                clean_db, "SELECT count(*) FROM jobs WHERE status = 'pending'"):
            jobs.process_batch(clean_db, settings)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert scalar(clean_db, "SELECT count(*) FROM jobs WHERE status = 'done'") == 20
    assert scalar(clean_db, "SELECT balance FROM accounts WHERE customer_id = 'cus_same'") == 2000
    assert scalar(clean_db, "SELECT count(*) FROM ledger_entries") == 20
    assert scalar(clean_db, "SELECT sum(attempts) FROM jobs") == 20


def test_done_job_is_never_claimed_again(clean_db: Engine, settings: Settings) -> None:
    invoice_job(clean_db)
    assert jobs.process_batch(clean_db, settings).done == 1
    assert jobs.process_batch(clean_db, settings).claimed == 0
    assert jobs.process_batch(clean_db, settings).claimed == 0


def test_failing_handler_rolls_back_retries_with_backoff_then_fails(
    clean_db: Engine, settings: Settings
) -> None:
    @handlers.handler("stripe", "test.explodes")
    def explodes(ctx: JobContext) -> None:
        ctx.conn.execute(sa.text("INSERT INTO accounts (customer_id, currency, balance) "
                                 "VALUES ('cus_boom', 'usd', 999)"))
        raise RuntimeError("boom")

    event = factories.stripe_event("test.explodes", {})
    job_id = factories.insert_event_and_job(clean_db, event)
    slow = Settings(**{**settings.__dict__, "job_retry_base_seconds": 60.0,
                       "job_max_attempts": 3})
    result = jobs.process_batch(clean_db, slow)
    assert result.retried and 48 <= result.retried[0][1] <= 72  # 60 s ± 20% jitter
    row = job_row(clean_db, job_id)
    assert row.status == "pending" and row.attempts == 1 and "boom" in row.last_error
    assert scalar(clean_db, "SELECT count(*) FROM accounts") == 0  # rolled back
    assert jobs.process_batch(clean_db, slow).claimed == 0  # not due yet
    for expected_attempts in (2, 3):
        with clean_db.begin() as conn:
            conn.execute(sa.text("UPDATE jobs SET run_at = now()"))
        jobs.process_batch(clean_db, slow)
        assert job_row(clean_db, job_id).attempts == expected_attempts
    row = job_row(clean_db, job_id)
    assert row.status == "failed" and row.finished_at is not None
    assert scalar(clean_db, "SELECT count(*) FROM accounts") == 0


def test_one_bad_job_does_not_undo_its_batch_neighbours(
    clean_db: Engine, settings: Settings
) -> None:
    good = [invoice_job(clean_db, amount=5, customer="cus_ok") for _ in range(3)]
    bad_event = factories.stripe_event("invoice.paid", {"id": "in_bad"})  # no customer
    bad = factories.insert_event_and_job(clean_db, bad_event)
    result = jobs.process_batch(clean_db, settings, limit=10)
    assert result.done == 3 and len(result.retried) == 1
    assert all(job_row(clean_db, j).status == "done" for j in good)
    assert job_row(clean_db, bad).status == "pending"
    assert scalar(clean_db, "SELECT balance FROM accounts WHERE customer_id = 'cus_ok'") == 15


def test_a_batch_logs_one_info_line_and_each_job_at_debug_its_failures_at_warning(
    clean_db: Engine, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(3):
        invoice_job(clean_db, amount=5, customer="cus_ok")
    no_customer = factories.stripe_event("invoice.paid", {"id": "in_bad"})
    factories.insert_event_and_job(clean_db, no_customer)

    with caplog.at_level(logging.DEBUG, logger="webhooks.worker.jobs"):
        jobs.process_batch(clean_db, settings, limit=10)

    info = [r for r in caplog.records if r.levelno == logging.INFO]
    assert [r.getMessage() for r in info] == ["batch committed"]
    assert (info[0].claimed, info[0].done, info[0].retried) == (4, 3, 1)  # type: ignore[attr-defined]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert debug == ["job done"] * 3
    [retry] = [r for r in caplog.records if r.levelno == logging.WARNING
               and r.getMessage() == "job attempt failed, will retry"]
    assert retry.event_id and retry.job_id  # type: ignore[attr-defined]


def test_unknown_event_type_completes_with_no_effect(clean_db: Engine, settings: Settings) -> None:
    job_id = factories.insert_event_and_job(clean_db, factories.stripe_event("customer.created",
                                                                            {"id": "cus_x"}))
    jobs.process_batch(clean_db, settings)
    row = job_row(clean_db, job_id)
    assert row.status == "done" and row.outcome == "no handler"
    assert scalar(clean_db, "SELECT count(*) FROM ledger_entries") == 0


def test_retry_delay_doubles_with_jitter_and_caps_at_an_hour() -> None:
    import random

    rng = random.Random(1)
    delays = [retries.retry_delay(n, 2.0, rng) for n in range(1, 6)]
    for n, delay in enumerate(delays, start=1):
        assert 0.8 * 2 * 2 ** (n - 1) <= delay <= 1.2 * 2 * 2 ** (n - 1)
    assert retries.retry_delay(40, 2.0, rng) <= 3600


def test_a_batch_skips_the_customers_another_batch_holds_so_batches_never_queue(
    clean_db: Engine, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """Two batches over the same ten accounts, claimed in opposite customer orders (ids
    1-10: cus_0..cus_9, ids 11-20: cus_9..cus_0), each holding every account it touched
    until it commits. The second batch neither deadlocks with the first nor waits for it:
    it leaves the jobs of customers the first holds pending, for a later claim."""

    @handlers.handler("stripe", "test.hold_account")
    def hold_account(ctx: JobContext) -> None:
        customer = ctx.payload["data"]["object"]["customer"]
        ctx.conn.execute(AccountLock, {"customer_id": customer, "currency": "usd"})
        ctx.conn.execute(sa.text("SELECT pg_sleep(0.03)"))

    customers = [f"cus_{n}" for n in range(10)]
    for customer in customers + customers[::-1]:
        factories.insert_event_and_job(clean_db, factories.stripe_event(
            "test.hold_account", {"customer": customer, "currency": "usd"}))
    first_result: list[jobs.BatchResult] = []
    first = threading.Thread(target=lambda: first_result.append(
        jobs.process_batch(clean_db, settings, limit=10, budget_seconds=30)))
    first.start()
    time.sleep(0.1)  # the first batch has claimed ids 1-10: it holds cus_0..cus_9
    started = time.monotonic()
    second = jobs.process_batch(clean_db, settings, limit=10, budget_seconds=30)
    waited, first_still_open = time.monotonic() - started, first.is_alive()
    first.join()
    # Waiting for the first batch's accounts would have taken until its commit (>= 0.2 s).
    assert waited < 0.15, waited
    assert first_still_open, "the first batch ended too soon for the test to mean anything"
    assert (second.claimed, second.done, second.more) == (10, 0, True)
    assert first_result[0].done == 10
    assert "batch rolled back" not in caplog.text
    later = jobs.process_batch(clean_db, settings, limit=10, budget_seconds=30)
    assert later.done == 10
    assert scalar(clean_db, "SELECT count(*) FROM jobs WHERE status = 'done'") == 20


def test_a_batch_commits_its_jobs_together_and_stops_after_its_time_budget(
    clean_db: Engine, settings: Settings
) -> None:
    @handlers.handler("stripe", "test.slow")
    def slow(ctx: JobContext) -> None:
        ctx.conn.execute(sa.text("SELECT pg_sleep(0.05)"))

    for _ in range(10):
        factories.insert_event_and_job(clean_db, factories.stripe_event("test.slow", {}))
    result = jobs.process_batch(clean_db, settings, limit=20, budget_seconds=0.12)
    # every due job claimed (10 of 20), a few applied: the rest need another wake-up
    assert 2 <= result.done <= 4 and result.claimed == 10 and result.more
    writers = {row[0] for row in _rows(clean_db, "SELECT xmin::text FROM jobs "
                                                 "WHERE status = 'done'")}
    assert len(writers) == 1  # one transaction completed every job it applied
    assert scalar(clean_db, "SELECT count(*) FROM jobs WHERE status = 'pending'") == (
        10 - result.done)


def _rows(engine: Engine, sql: str) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(sql)))


def test_a_batch_claims_only_what_it_can_apply_in_its_time_budget() -> None:
    pace = jobs.Pace()
    assert pace.claim_limit(50, 0.25) == jobs.COLD_CLAIM  # nothing known yet
    pace.observe(0.4, 2)  # 0.2 s a job
    assert pace.claim_limit(50, 0.25) == 1
    for _ in range(30):
        pace.observe(0.025, 50)  # 0.5 ms a job
    assert pace.claim_limit(50, 0.25) == 50


def test_a_statement_failing_inside_ctx_fetch_is_rolled_back_and_retried(
    clean_db: Engine, settings: Settings
) -> None:
    """ctx.fetch goes straight through the driver: its error must still roll back the
    batch, then the job's savepoint, and be recorded as a failed attempt."""

    @handlers.handler("stripe", "test.bad_statement")
    def bad_statement(ctx: JobContext) -> None:
        ctx.fetch(AccountLock, {"customer_id": "cus_partial", "currency": "usd"})
        ctx.fetch(AccountLock, {"customer_id": "cus_x", "currency": None})

    good = invoice_job(clean_db, amount=7, customer="cus_ok")
    bad = factories.insert_event_and_job(clean_db, factories.stripe_event(
        "test.bad_statement", {"customer": "cus_x"}))
    result = jobs.process_batch(clean_db, settings, limit=10)
    assert result.done == 1 and len(result.retried) == 1
    assert job_row(clean_db, good).status == "done"
    row = job_row(clean_db, bad)
    assert row.status == "pending" and row.attempts == 1
    assert "IntegrityError" in row.last_error and "currency" in row.last_error
    assert scalar(clean_db, "SELECT count(*) FROM accounts WHERE customer_id = 'cus_partial'") == 0
