"""Dramatiq actors: thin bindings over worker/jobs.py, worker/outbox.py, worker/notify.py and
worker/calls.py.
Importing this module configures the broker from the environment, so the `dramatiq` command (run by
`webhooks worker`) can load it.

Each message is a wake-up that carries at most an id: the actor claims due rows itself,
so a lost message only delays work (the clock re-enqueues) and a duplicate is a no-op.
Dramatiq retries only a wake-up that found no database (shared/wakeups.py
database_back): the rows own attempts and scheduling.
"""

from __future__ import annotations

import threading

import dramatiq
from sqlalchemy.engine import Engine

from webhooks.shared import db, hooks, tracing, wakeups
from webhooks.shared.logs import configure_logging
from webhooks.shared.settings import Settings
from webhooks.worker import calls, jobs, notify, outbox, shutdown

shutdown.tolerate_group_sigterm()  # imported in each worker process, after Dramatiq's handler
settings = Settings.from_env()
configure_logging(settings)
tracing.configure(settings, tracing.WORKER_SERVICE)  # in each worker process (this import runs)
broker = wakeups.create_broker(settings)
dramatiq.set_broker(broker)
hooks.load(settings.handler_modules)

_engine: Engine | None = None
_engine_lock = threading.Lock()


def engine() -> Engine:
    """One pool per worker process, created after the fork."""
    global _engine
    with _engine_lock:
        if _engine is None:
            _engine = db.create_engine(settings, pool_size=8, local_commits=True)
        return _engine


@dramatiq.actor(queue_name=wakeups.JOBS_QUEUE, actor_name=wakeups.PROCESS_JOBS,
                time_limit=120_000)
def process_jobs(job_id: int | None = None) -> None:
    """Apply due jobs (worker.jobs.on_wakeup); job_id names the job whose commit sent this
    wake-up, for the logs."""
    jobs.on_wakeup(engine(), settings, broker, job_id)


@dramatiq.actor(queue_name=wakeups.OUTBOX_QUEUE, actor_name=wakeups.DISPATCH_OUTBOX,
                time_limit=300_000)
def dispatch_outbox() -> None:
    """Send due outbox emails through Postmark (or the log), once per idempotency key
    (worker.outbox.on_wakeup)."""
    outbox.on_wakeup(engine(), settings, broker)


@dramatiq.actor(queue_name=wakeups.NOTIFY_QUEUE, actor_name=wakeups.DISPATCH_NOTIFICATIONS,
                time_limit=300_000)
def dispatch_notifications() -> None:
    """Send due notification deliveries to Slack, email and the webhook, once each
    (worker.notify.on_wakeup), apart from the receipts' dispatch."""
    notify.on_wakeup(engine(), settings, broker)


@dramatiq.actor(queue_name=wakeups.CALLS_QUEUE, actor_name=wakeups.DISPATCH_CALLS,
                time_limit=300_000)
def dispatch_calls() -> None:
    """Make the due calls to other APIs, once per idempotency key (worker.calls.on_wakeup),
    apart from the receipts' and the notifications' dispatch."""
    calls.on_wakeup(engine(), settings, broker)
