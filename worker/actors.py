"""Dramatiq actors. Importing this module configures the broker from the environment, so
the `dramatiq` command (run by `webhooks worker`) can load it.

Each message is a wake-up that carries at most an id: the actor claims due rows itself,
so a lost message only delays work (the clock re-enqueues) and a duplicate is a no-op.
Dramatiq's own retries are off: the rows own attempts and scheduling.
"""

from __future__ import annotations

import threading
import time

import dramatiq
from sqlalchemy.engine import Engine

from shared import db, tracing, wakeups
from shared.logs import configure_logging
from shared.settings import Settings
from worker import handlers, jobs, outbox, shutdown

shutdown.tolerate_group_sigterm()  # imported in each worker process, after Dramatiq's handler
settings = Settings.from_env()
configure_logging(settings)
tracing.configure(settings, tracing.WORKER_SERVICE)  # in each worker process (this import runs)
broker = wakeups.create_broker(settings)
dramatiq.set_broker(broker)
handlers.load(settings)

# Jobs one batch claims and applies in one transaction (worker/jobs.py); a batch also
# stops after jobs.BATCH_SECONDS.
JOB_BATCH_SIZE = wakeups.JOBS_PER_MESSAGE
# A wake-up claims batch after batch while they apply jobs (a backlog drains, or jobs keep
# arriving while a batch runs) instead of waiting for a broker round trip or the web's next
# wake-up; for at most this long, then a new message carries on if more are due. Well inside
# the actor's time limit, and short, so that one message never holds its thread for long.
JOB_LOOP_SECONDS = 1.0
_engine: Engine | None = None
_engine_lock = threading.Lock()


def engine() -> Engine:
    """One pool per worker process, created after the fork."""
    global _engine
    with _engine_lock:
        if _engine is None:
            _engine = db.create_engine(settings, pool_size=8)
        return _engine


@dramatiq.actor(queue_name=wakeups.JOBS_QUEUE, actor_name=wakeups.PROCESS_JOBS,
                max_retries=0, time_limit=120_000)
def process_jobs(job_id: int | None = None) -> None:
    """Apply due jobs, oldest first, one batch transaction after another while they find
    jobs to apply (see JOB_LOOP_SECONDS). job_id names the job whose commit sent this
    wake-up (for the logs); whichever jobs are due get claimed."""
    deadline = time.monotonic() + JOB_LOOP_SECONDS
    while True:
        result = jobs.process_batch(engine(), settings, limit=JOB_BATCH_SIZE)
        outbox_woken = _after_batch(result)
        # Stop after a batch that applied nothing: none was due, or other batches held its
        # jobs' customers (one message does not spin on the same rows). Stop too when its
        # emails needed a dispatch message: this thread lets go, so that the dispatch is
        # not queued behind looping wake-ups.
        if not result.done or outbox_woken or time.monotonic() >= deadline:
            break
    if result.more:
        wakeups.wake_jobs(broker, [job_id or 0])  # more may be due: a new message carries on


def _after_batch(result: jobs.BatchResult) -> bool:
    """The wake-ups a committed batch asks for: the outbox for its emails, each retried job
    at its time, the jobs deferred after a lock conflict at once. True if it sent a
    dispatch message (no dispatch runs in this process)."""
    outbox_woken = bool(result.emails_queued) and _wake_outbox()
    for retried_id, delay in result.retried:
        wakeups.wake_jobs(broker, [retried_id], delay=delay)
    if result.deferred:
        wakeups.wake_jobs(broker, result.deferred)
    return outbox_woken


# Wake-ups for emails go to the dispatch loop running in this process when there is one.
_outbox_dispatch = outbox.OneDispatchPerProcess()
# Well inside the actor's time limit: a message that ran on for ever would be interrupted
# at an arbitrary point.
OUTBOX_LOOP_SECONDS = 60.0
# Between two rounds of a dispatch that found fewer emails than a full claim, emails gather
# this long: at a steady rate, one claim and one mark carry several batches' emails.
OUTBOX_GATHER_SECONDS = 0.05


def _wake_outbox() -> bool:
    """After a batch committed emails: the dispatch running in this process takes them,
    else a message wakes a dispatch in some worker process (True)."""
    if _outbox_dispatch.mark_due():
        wakeups.wake_outbox(broker, 1)
        return True
    return False


def _outbox_round() -> None:
    result = outbox.dispatch_due(engine(), settings)
    if result.more:
        wakeups.wake_outbox(broker, 1)  # here again, or another process
    elif result.claimed:
        time.sleep(OUTBOX_GATHER_SECONDS)


@dramatiq.actor(queue_name=wakeups.OUTBOX_QUEUE, actor_name=wakeups.DISPATCH_OUTBOX,
                max_retries=0, time_limit=300_000)
def dispatch_outbox() -> None:
    """Send due outbox emails through Postmark (or the log), once per idempotency key."""
    if not _outbox_dispatch.run(_outbox_round, OUTBOX_LOOP_SECONDS):
        wakeups.wake_outbox(broker, 1)  # a fresh message carries on
