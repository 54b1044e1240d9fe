"""Claim, complete, retry and fail jobs. The job row is the truth; messages only wake us.
The transitions are shared.models.JobStatus's.

A drain claims up to `limit` due jobs with one FOR UPDATE SKIP LOCKED and applies them in
that one transaction: each job's business writes and its `done` mark commit together (with
its neighbours'), or not at all. A worker killed at any moment leaves an open transaction
that Postgres rolls back: the locks drop, the jobs are still pending, the next claim takes
them. One COMMIT for many jobs is what makes a drain fast.

The batch is optimistic: no savepoint per job. If any handler raises (or a statement
fails), the whole batch rolls back and its jobs run again one transaction each, with a
savepoint around the handler so that a failed attempt is recorded in the same transaction
as its rollback. Handlers may not have effects outside the database (see webhooks.shared.handlers),
so running one twice this way is invisible.

Locks: a batch holds the business rows of all its jobs until it commits. It first takes
(with advisory try-locks, never waiting) the key of each job, as its provider's lock key
hook (shared.hooks.lock_key) gives it from the payload, and leaves for a later claim the
jobs whose key another open batch holds: two batches never queue on one key (the reference
app's: a customer's account). It runs its jobs sorted by their lock keys' order (the
reference app's: the customer, currency and id of data.object, what its handlers lock),
then by id, so that batches take any other rows in one global order; a handler that locks
something else can still deadlock, and Postgres then aborts one batch, whose jobs run one
at a time. A provider without a lock key: its jobs take no try-lock and run in id order.
A batch also stops taking new jobs after BATCH_SECONDS, and claims only as many as it can
apply in that time (Pace), so slow handlers neither keep locks long nor keep claimed jobs
from idle workers.

Before its handler, a job takes its provider's step, when the provider's record has one
(shared/providers/base.py Provider.before_handler; Stripe's: the source's livemode policy,
then a thin event's fetch). The step may give the payload the handler applies, or end the
job done with no effect (NoEffect), or fail (NotReady): that job's failed attempt, recorded
in the batch, and the batch carries on without it.

Every statement that marks a job (done, retry, failed) also writes its event's search
document (queries.JobMarkDoneMany): an event is searchable by its words once its job has
run, whatever the outcome, in the job's own transaction, never the ingest's.

A wake-up message (worker/actors.py) runs `on_wakeup`: batch after batch while they apply
jobs, then the wake-ups the committed batches ask for (their emails, their retries).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import dramatiq
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from webhooks.shared import (
    db,
    handlers,
    hooks,
    metrics,
    notifications,
    payloads,
    providers,
    queries,
    sources,
    tracing,
    wakeups,
)
from webhooks.shared.errors import DatabaseUnavailable, PermanentJobError, describe
from webhooks.shared.providers.base import NoEffect, NotReady, PendingJob
from webhooks.shared.queries import ClaimedJob
from webhooks.shared.settings import Settings
from webhooks.worker import outbox, retries

log = logging.getLogger(__name__)

# Jobs one batch of a wake-up claims and applies in one transaction.
BATCH_SIZE = wakeups.JOBS_PER_MESSAGE
# A wake-up claims batch after batch while they apply jobs (a backlog drains, or jobs keep
# arriving while a batch runs) instead of waiting for a broker round trip or the web's next
# wake-up; for at most this long, then a new message carries on if more are due. Well inside
# the actor's time limit, and short, so that one message never holds its thread for long.
LOOP_SECONDS = 1.0
BATCH_SECONDS = 0.25  # a batch takes no new job after this long
COLD_CLAIM = 10  # a process's first claims, before it knows how long its jobs take
TAIL_SLACK_SECONDS = 0.5  # a coalesced tail's wake-up, this long after its window closes


class Pace:
    """How long a job takes in this process (a moving average over batches). A batch
    claims about as many jobs as it can apply within its time budget: claimed jobs are
    locked until it commits, and slow handlers must not keep work from idle workers."""

    def __init__(self) -> None:
        self.seconds_per_job = 0.0

    def claim_limit(self, limit: int, budget_seconds: float) -> int:
        if self.seconds_per_job <= 0:
            return min(limit, COLD_CLAIM)
        return max(1, min(limit, int(budget_seconds / self.seconds_per_job)))

    def observe(self, seconds: float, jobs: int) -> None:
        if jobs:
            latest = seconds / jobs
            previous = self.seconds_per_job
            self.seconds_per_job = latest if previous <= 0 else 0.7 * previous + 0.3 * latest


PACE = Pace()  # per process; threads share it (a float assignment is atomic)


@dataclass
class BatchResult:
    claimed: int = 0
    done: int = 0
    retried: list[tuple[int, float]] = field(default_factory=list)  # (job id, delay)
    failed: int = 0
    deferred: list[int] = field(default_factory=list)  # lock conflicts: run again now
    emails_queued: int = 0
    calls_queued: int = 0
    more: bool = False  # claimed jobs left pending (time budget), or the claim was full
    # What the open transaction reports (written just before its COMMIT), and what the
    # committed ones recorded (their wake-ups).
    notes: notifications.Notes = field(default_factory=notifications.Notes)
    notified: notifications.Queued = field(default_factory=notifications.Queued)


def on_wakeup(engine: Engine, settings: Settings, broker: dramatiq.Broker,
              job_id: int | None = None) -> None:
    """Apply due jobs, oldest first, one batch transaction after another while they find
    jobs to apply (see LOOP_SECONDS), and send the wake-ups each committed batch asks for.
    job_id names the job whose commit sent this wake-up (for the logs); whichever jobs are
    due get claimed."""
    deadline = time.monotonic() + LOOP_SECONDS
    while True:
        result = process_batch(engine, settings, limit=BATCH_SIZE)
        outbox_woken = _wake_after(broker, result)
        # Stop after a batch that applied nothing: none was due, or other batches held its
        # jobs' customers (one message does not spin on the same rows). Stop too when its
        # emails needed a dispatch message: this thread lets go, so that the dispatch is
        # not queued behind looping wake-ups.
        if not result.done or outbox_woken or time.monotonic() >= deadline:
            break
    if result.more:
        wakeups.wake_jobs(broker, [job_id or 0])  # more may be due: a new message carries on


def _wake_after(broker: dramatiq.Broker, result: BatchResult) -> bool:
    """The wake-ups a committed batch asks for: the outbox for its emails, each retried job
    at its time, the jobs deferred after a lock conflict at once. True if it sent a
    dispatch message (no dispatch runs in this process)."""
    outbox_woken = bool(result.emails_queued) and outbox.wake(broker)
    if result.calls_queued:
        wakeups.wake_calls(broker)
    if result.notified.due_now:
        wakeups.wake_notifications(broker)
    if result.notified.tail_in is not None:
        wakeups.wake_notifications(broker, delay=result.notified.tail_in + TAIL_SLACK_SECONDS)
    for retried_id, delay in result.retried:
        wakeups.wake_jobs(broker, [retried_id], delay=delay)
    if result.deferred:
        wakeups.wake_jobs(broker, result.deferred)
    return outbox_woken


def process_batch(
    engine: Engine, settings: Settings, *, limit: int = 10,
    budget_seconds: float = BATCH_SECONDS, pace: Pace = PACE,
) -> BatchResult:
    """Claim and apply up to `limit` due jobs in one transaction. A batch that fails rolls
    back, and its jobs run one transaction each (see _one_at_a_time)."""
    applied: list[_Applied] = []
    ordered: list[ClaimedJob] = []
    result = BatchResult()
    tried = 0  # ordered[tried - 1] is the job being run
    started = time.monotonic()
    try:
        with db.transaction(engine) as conn:
            limit = pace.claim_limit(limit, budget_seconds)
            rows = _claim(conn, queries.JobClaimDue, {"limit": limit})
            metrics.job_claims.labels("jobs" if rows else "none").inc()
            ordered = _runnable(conn, rows)
            for row in ordered:
                if tried and time.monotonic() - started > budget_seconds:
                    break
                tried += 1
                attempt = _attempt(conn, settings, row, result)
                if attempt is not None:
                    applied.append(attempt)
            if applied:
                _mark_done(conn, applied)
            _notify(conn, settings, applied, result)
    except DatabaseUnavailable:
        raise
    except Exception as error:
        if db.is_unavailable(error):
            raise
        # ordered[tried - 1] is the job whose handler (or statement) failed.
        result = _one_at_a_time(engine, settings, ordered, tried, error,
                                started + budget_seconds)
        _log_batch(result, started)
        return result
    pace.observe(time.monotonic() - started, len(applied))
    # more: the claim was full (others may be due), or the time budget left claimed jobs
    result.claimed, result.more = len(rows), len(rows) == limit or tried < len(rows)
    for job in applied:
        _after_done(job, result)
    _log_batch(result, started)
    return result


def _log_batch(result: BatchResult, started: float) -> None:
    """One INFO line per batch that claimed anything: the jobs and outbox tables are the
    record of every job, so each job's own line is at DEBUG; failures and retries are
    logged per job at WARNING or ERROR with their ids (_after_error)."""
    if result.claimed:
        log.info("batch committed", extra={
            "claimed": result.claimed, "done": result.done, "failed": result.failed,
            "retried": len(result.retried), "deferred": len(result.deferred),
            "emails_queued": result.emails_queued,
            "seconds": round(time.monotonic() - started, 4)})


def _notify(conn: Connection, settings: Settings, applied: Sequence[_Applied],
            result: BatchResult) -> None:
    """Record, last in the transaction (shared/notifications.py: the lock order), what it
    reports: the failures _after_error noted, and the done jobs' sources (a failing one
    has recovered)."""
    for job in applied:
        result.notes.job_done(job.row.provider, job.row.source)
        for occurrence in job.notifications:
            result.notes.add(occurrence)
    result.notified += notifications.flush(conn, settings, result.notes)


@dataclass(frozen=True)
class _Applied:
    row: ClaimedJob
    outcome: str
    emails_queued: int
    notifications: tuple[notifications.Occurrence, ...] = ()
    calls_queued: int = 0


def _claim(conn: Connection, statement: sa.TextClause,
           params: dict[str, Any]) -> list[ClaimedJob]:
    """Claimed jobs with their payloads loaded here, never by the driver: a payload Python
    cannot load (shared.payloads) becomes Unloadable, and only its own job fails."""
    rows = db.fetch_all_in(conn, statement, params, ClaimedJob)
    return [row._replace(payload=payloads.load(row.payload)) for row in rows]


def _lock_key(row: ClaimedJob) -> hooks.LockKey:
    """The job's lock key, as its provider's hook gives it; none: no key, first in order."""
    return hooks.lock_key_of(row.provider, row.payload) or hooks.LockKey("")


def _runnable(conn: Connection, rows: Sequence[ClaimedJob]) -> list[ClaimedJob]:
    """The claimed jobs in lock order (then by id), less those whose key another batch
    holds; this batch now holds the keys of the rest. A batch does not wait for another's
    commit, which under load chained batches into convoys (the latency this cost:
    benchmarks/results/README.md). The others stay pending, for a later claim."""
    locks = {row.id: _lock_key(row) for row in rows}
    ordered = sorted(rows, key=lambda row: (locks[row.id].sort_key(), row.id))
    wanted = sorted({lock.key for lock in locks.values() if lock.key})
    if not wanted:
        return ordered
    taken = set(db.fetch_scalars_in(conn, queries.JobKeysTaken, {
        "keys": wanted, "space": queries.JOB_KEY_LOCK_SPACE}))
    return [row for row in ordered if not locks[row.id].key or locks[row.id].key in taken]


def _job_context(conn: Connection, settings: Settings, row: ClaimedJob) -> handlers.JobContext:
    return handlers.JobContext(
        conn=conn, settings=settings, job_id=row.id, provider=row.provider,
        event_id=row.event_id, event_type=row.event_type, payload=row.payload,
        source=row.source, account=row.account, livemode=row.livemode,
    )


def _attempt(conn: Connection, settings: Settings, row: ClaimedJob,
             result: BatchResult) -> _Applied | None:
    """The job applied, after its provider's step before a handler (when its record has
    one): refused by it (done with no effect), or run with the payload it gives; None if
    the step failed (that failed attempt is recorded at once, in the batch's transaction:
    nothing of the job was written, and the job is left out of the batch)."""
    record = providers.get(row.provider)
    if record is None or record.before_handler is None:
        return _run_handler(conn, settings, row)
    try:
        prepared = record.before_handler(_pending(settings, row))
    except NotReady as error:
        _after_error(conn, settings, row, error, result, _log_fields(row))
        return None
    if isinstance(prepared, NoEffect):
        log.debug(prepared.why, extra={**_log_fields(row), **prepared.fields})
        return _Applied(row, prepared.outcome, 0)
    return _run_handler(conn, settings, row._replace(payload=prepared))


def _pending(settings: Settings, row: ClaimedJob) -> PendingJob:
    return PendingJob(
        event_id=row.event_id, event_type=row.event_type, payload=row.payload,
        source_name=row.source, source=sources.registry(settings).get(row.provider, row.source),
        livemode=row.livemode, account=row.account,
        handled=bool(handlers.for_event(row.provider, row.event_type)),
        api_base=settings.api_base(row.provider))


def _log_fields(row: ClaimedJob) -> dict[str, Any]:
    return {"job_id": row.id, "provider": row.provider, "event_id": row.event_id}


def _run_handler(conn: Connection, settings: Settings, row: ClaimedJob) -> _Applied:
    """The job's handler, in the job's span when tracing is on: the child of the ingest's
    request span (its traceparent stored with the job), the handler's statements within it."""
    with tracing.span(f"job {row.provider} {row.event_type}", row.trace_context, {
            "webhooks.provider": row.provider, "webhooks.event_id": row.event_id,
            "webhooks.event_type": row.event_type, "webhooks.job_id": row.id,
            "webhooks.attempt": row.attempts + 1}) as span:
        if isinstance(row.payload, payloads.Unloadable):
            raise PermanentJobError(f"the stored payload cannot be loaded: {row.payload.reason}")
        ctx = _job_context(conn, settings, row)
        outcome = _outcome(ctx, handlers.for_event(row.provider, row.event_type))
        applied = _Applied(row, outcome[:200], ctx.emails_queued, tuple(ctx.notifications),
                           ctx.calls_queued)
        span.set_attribute("webhooks.outcome", applied.outcome)
    return applied


def _outcome(ctx: handlers.JobContext, apps: list[tuple[str, handlers.Handler]]) -> str:
    """Each running app's handler of the event, in the apps' order, on the one context (its
    transaction); the job's outcome names each app's when several ran."""
    if not apps:
        return "no handler"
    outcomes = [(app, function(ctx) or "done") for app, function in apps]
    if len(outcomes) == 1:
        return outcomes[0][1]
    return "; ".join(f"{app}: {outcome}" for app, outcome in outcomes)


def _mark_done(conn: Connection, applied: list[_Applied]) -> None:
    """The jobs done, and their events' search documents written, in one statement."""
    marked = db.fetch_in(conn, queries.JobMarkDoneMany, {
        "ids": [job.row.id for job in applied],
        "created": [job.row.received_at for job in applied],  # the job's day: its partition
        "outcomes": [job.outcome for job in applied],
    })
    updated = marked[0] if marked else 0
    if updated != len(applied):
        # Impossible while we hold the row locks from the claim; refuse to commit if it is.
        raise RuntimeError(f"{len(applied) - updated} claimed job(s) were not pending")


def _after_done(job: _Applied, result: BatchResult) -> None:
    """Count and log a job whose transaction has committed."""
    row = job.row
    result.done += 1
    result.emails_queued += job.emails_queued
    result.calls_queued += job.calls_queued
    # Types a handler names only: event types come from senders (GitHub's and Shopify's
    # are unsigned headers), and every new label value would be a new series.
    event_type = row.event_type if handlers.registered(row.provider, row.event_type) else "other"
    metrics.jobs_done.labels(row.provider, event_type).inc()
    metrics.job_latency.observe(max((datetime.now(UTC) - row.received_at).total_seconds(), 0))
    log.debug("job done", extra={"job_id": row.id, "provider": row.provider,
                                "event_id": row.event_id, "outcome": job.outcome})


def _one_at_a_time(engine: Engine, settings: Settings, ordered: list[ClaimedJob], reached: int,
                   error: Exception, deadline: float) -> BatchResult:
    """After a failed batch (rolled back): its jobs one transaction each, in the same order;
    at least the `reached` first ones (the failed one included, so that its attempt is
    recorded), then the others until the batch's deadline. The rest wait for a claim."""
    log.warning("batch rolled back, its jobs run one at a time",
                extra={"jobs": len(ordered), "error": f"{type(error).__name__}: {error}"[:300]})
    result = BatchResult(more=True)
    for index, row in enumerate(ordered):
        if index >= reached and time.monotonic() > deadline:
            break
        _process_one(engine, settings, row.id, result)
    return result


def _process_one(engine: Engine, settings: Settings, job_id: int, result: BatchResult) -> None:
    """Claim one job by id, if it is still due, and apply it in its own transaction."""
    with db.transaction(engine) as conn:
        rows = _claim(conn, queries.JobClaimById, {"id": job_id})
        if not rows:
            return
        row = rows[0]
        result.claimed += 1
        applied = _apply(conn, settings, row, result)
        _notify(conn, settings, [applied] if applied else [], result)
    if applied is not None:
        _after_done(applied, result)


def _apply(
    conn: Connection, settings: Settings, row: ClaimedJob, result: BatchResult
) -> _Applied | None:
    """One job in its own transaction: the handler in a savepoint, so that a failed attempt
    is rolled back and recorded (retry or failed) in the same transaction."""
    log_fields = _log_fields(row)
    savepoint = conn.begin_nested()
    try:
        applied = _attempt(conn, settings, row, result)
        savepoint.commit()
        if applied is None:  # its thin fetch failed: that attempt is recorded
            return None
    except Exception as error:
        savepoint.rollback()
        _after_error(conn, settings, row, error, result, log_fields)
        return None
    _mark_done(conn, [applied])
    return applied


def _after_error(
    conn: Connection, settings: Settings, row: ClaimedJob, error: Exception, result: BatchResult,
    log_fields: dict[str, Any],
) -> None:
    if db.is_unavailable(error):
        raise error  # the connection is gone: the whole transaction is lost anyway
    if db.is_retryable(error):
        # A deadlock or serialization failure says nothing about the event: leave the job
        # pending, untouched, and run it again right after this transaction commits.
        log.warning("job deferred after lock conflict", extra=log_fields)
        result.deferred.append(row.id)
        return
    message = describe(error)
    attempts = row.attempts + 1
    policy = retries.for_jobs(settings)
    final = isinstance(error, PermanentJobError) or policy.exhausted(attempts)
    result.notes.failed_attempt(row.provider, row.source, job_id=row.id,
                                event_id=row.event_id, error=message, final=final)
    if final:
        _mark(conn, queries.JobMarkFailed,
              {"id": row.id, "created_at": row.received_at, "error": message})
        result.failed += 1
        metrics.jobs_failed.inc()
        log.error("job failed", extra={**log_fields, "attempts": attempts, "error": message})
        return
    delay = policy.delay(attempts)
    _mark(conn, queries.JobMarkRetry, {"id": row.id, "created_at": row.received_at,
                                       "error": message, "delay": delay})
    result.retried.append((row.id, delay))
    metrics.jobs_retried.inc()
    log.warning("job attempt failed, will retry",
                extra={**log_fields, "attempts": attempts, "delay": round(delay, 2),
                       "error": message})


def _mark(conn: Connection, statement: sa.TextClause, params: dict[str, Any]) -> None:
    """A retry or a failure marked, with the event's search document."""
    updated = conn.execute(statement, params).scalar_one()
    if updated != 1:
        # Impossible while we hold the row lock from the claim; refuse to commit if it happens.
        raise RuntimeError(f"job {params['id']} was not pending when it was marked")

