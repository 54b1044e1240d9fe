"""Claim, complete, retry and fail jobs. The job row is the truth; messages only wake us.

    pending --(handler committed, same transaction)--> done
    pending --(error, attempts left)--> pending, run_at = now() + backoff
    pending --(error, attempts exhausted; or PermanentJobError)--> failed
    failed  --(webhooks replay)--> pending

One transaction per job: the claim's row lock (FOR UPDATE SKIP LOCKED), the job's business
writes and its `done` mark commit together; a savepoint around the handler lets a failed
attempt be recorded in the same transaction. A worker killed at any moment leaves an open
transaction that Postgres rolls back: the lock drops, the job is still pending, and the
next claim takes it.

Not one transaction per batch of jobs: such a transaction holds the account locks of every
job in it until it commits, and two batches that reach two customers in opposite orders
deadlock (Postgres breaks that only after deadlock_timeout, a second, and a backlog drain
then crawls). A job's transaction holds its own business rows only.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from shared import db, metrics, queries
from shared.errors import PermanentJobError
from shared.settings import Settings
from worker import handlers

log = logging.getLogger(__name__)

MAX_DELAY_SECONDS = 3600.0
MAX_ERROR_LENGTH = 2000


@dataclass
class BatchResult:
    claimed: int = 0
    done: int = 0
    retried: list[tuple[int, float]] = field(default_factory=list)  # (job id, delay)
    failed: int = 0
    deferred: list[int] = field(default_factory=list)  # lock conflicts: run again now
    emails_queued: int = 0


def retry_delay(attempts: int, base: float, rng: random.Random | None = None) -> float:
    """Seconds before attempt `attempts + 1`: base doubling per attempt, ±20% jitter,
    capped at an hour."""
    rng = rng or random.Random()
    exponent = min(max(attempts - 1, 0), 32)
    delay = min(base * (2**exponent), MAX_DELAY_SECONDS)
    return float(min(delay * rng.uniform(0.8, 1.2), MAX_DELAY_SECONDS))


def process_batch(
    engine: Engine, settings: Settings, *, job_id: int | None = None, limit: int = 10
) -> BatchResult:
    """Claim and apply up to `limit` due jobs (or just `job_id`), each in its own
    transaction and at most once per call; stops early when none is due."""
    result = BatchResult()
    seen: set[int] = set()
    for _ in range(1 if job_id is not None else limit):
        with db.transaction(engine) as conn:
            if job_id is not None:
                row = conn.execute(queries.JobClaimById, {"id": job_id}).first()
            else:
                row = conn.execute(queries.JobClaimDue, {"limit": 1}).first()
            if row is None or row.id in seen:  # seen: retried with no delay, due again
                break
            seen.add(row.id)
            result.claimed += 1
            _apply(conn, settings, row, result)
    _observe(result)
    return result


def _apply(conn: Connection, settings: Settings, row: Any, result: BatchResult) -> None:
    context = {"job_id": row.id, "provider": row.provider, "event_id": row.event_id}
    ctx = handlers.JobContext(
        conn=conn, settings=settings, job_id=row.id, provider=row.provider,
        event_id=row.event_id, event_type=row.event_type, payload=row.payload,
    )
    function = handlers.find(row.provider, row.event_type)
    savepoint = conn.begin_nested()
    try:
        outcome = function(ctx) if function else "no handler"
        savepoint.commit()
    except Exception as error:
        savepoint.rollback()
        _after_error(conn, settings, row, error, result, context)
        return
    _mark(conn, queries.JobMarkDone, {"id": row.id, "outcome": (outcome or "done")[:200]})
    result.done += 1
    result.emails_queued += ctx.emails_queued
    metrics.jobs_done.labels(row.provider, row.event_type).inc()
    metrics.job_latency.observe(max((datetime.now(UTC) - row.received_at).total_seconds(), 0))
    log.info("job done", extra={**context, "outcome": outcome})


def _after_error(
    conn: Connection, settings: Settings, row: Any, error: Exception, result: BatchResult,
    context: dict[str, Any],
) -> None:
    if db.is_unavailable(error):
        raise error  # the connection is gone: the whole transaction is lost anyway
    if db.is_retryable(error):
        # A deadlock or serialization failure says nothing about the event: leave the job
        # pending, untouched, and run it again right after this transaction commits.
        log.warning("job deferred after lock conflict", extra=context)
        result.deferred.append(row.id)
        return
    message = f"{type(error).__name__}: {error}"[:MAX_ERROR_LENGTH]
    attempts = row.attempts + 1
    if isinstance(error, PermanentJobError) or attempts >= settings.job_max_attempts:
        _mark(conn, queries.JobMarkFailed, {"id": row.id, "error": message})
        result.failed += 1
        metrics.jobs_failed.inc()
        log.error("job failed", extra={**context, "attempts": attempts, "error": message})
        return
    delay = retry_delay(attempts, settings.job_retry_base_seconds)
    _mark(conn, queries.JobMarkRetry, {"id": row.id, "error": message, "delay": delay})
    result.retried.append((row.id, delay))
    metrics.jobs_retried.inc()
    log.warning("job attempt failed, will retry",
                extra={**context, "attempts": attempts, "delay": round(delay, 2), "error": message})


def _mark(conn: Connection, statement: sa.TextClause, params: dict[str, Any]) -> None:
    updated = conn.execute(statement, params).rowcount
    if updated != 1:
        # Impossible while we hold the row lock from the claim; refuse to commit if it happens.
        raise RuntimeError(f"job {params['id']} was not pending when it was marked")


def _observe(result: BatchResult) -> None:
    if result.claimed:
        log.debug("batch committed", extra={"claimed": result.claimed, "done": result.done})


def wait_for_database(engine: Engine, timeout: float) -> None:
    """Used by process start-up: wait until Postgres answers (or raise)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            return
        except sa.exc.SQLAlchemyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
