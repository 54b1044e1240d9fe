"""The clock's schedule, on APScheduler:

- sweep, every SWEEP_INTERVAL_SECONDS (webhooks/clock/sweep.py);
- reconcile, every RECONCILE_INTERVAL_SECONDS, each source with API credentials (each
  with its own), from its last successful run (less a margin) or 72 hours back
  (shared/reconciliation.py);
- after a failover, every SWEEP_INTERVAL_SECONDS whatever RECONCILE_INTERVAL_SECONDS says:
  each source with credentials not yet reconciled over RECONCILE_AFTER_FAILOVER_HOURS
  before the latest failover the sweep recorded (shared/failover.py);
- prune, nightly: retention (shared/retention.py);
- partitions, hourly and at start: the days ahead, the dedup generation, statistics
  (shared/partitions.py);
- audit, every AUDIT_INTERVAL_SECONDS (the first within AUDIT_FIRST_AFTER_SECONDS of the
  start): `webhooks audit`'s checks (shared/audit.py), each violation logged at ERROR, each
  check's count recorded for web's /metrics.

Several clocks running by mistake do no harm: each tick takes a Postgres advisory lock
and skips if another clock holds it, and the work it triggers is idempotent anyway.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

import dramatiq
from apscheduler.schedulers.blocking import BlockingScheduler
from sqlalchemy.engine import Engine

from webhooks import starting
from webhooks.clock.sweep import Beat, sweep
from webhooks.shared import audit as audits
from webhooks.shared import (
    db,
    failover,
    hooks,
    partitions,
    queries,
    reconciliation,
    retention,
    wakeups,
)
from webhooks.shared.errors import describe
from webhooks.shared.settings import Settings
from webhooks.shared.sources import Source

log = logging.getLogger(__name__)
AUDIT_FIRST_AFTER_SECONDS = 300  # a clock's first audit, at most this long after its start
STOP_SECONDS = 10  # the longest a stopped clock waits for its ticks in flight


def prune(engine: Engine, days: int, horizon_days: int) -> int | None:
    """Retention, unless another clock is pruning right now (None)."""
    with engine.begin() as conn:
        if not conn.execute(queries.ClockTryLock, {"name": "webhooks:prune"}).scalar_one():
            return None
    pruned = retention.prune(engine, days, horizon_days)
    log.info("pruned finished events", extra={
        "deleted": pruned.events, "days": days, "partitions": pruned.partitions,
        "kept_jobs": pruned.kept, "dedup_generations": pruned.generations})
    return pruned.events


def maintain_partitions(engine: Engine, horizon_days: int) -> list[str] | None:
    """The days' partitions ahead, the dedup generation and the partitioned tables'
    statistics (shared/partitions.py), unless another clock is at it (None)."""
    with engine.begin() as conn:
        if not conn.execute(queries.ClockTryLock, {"name": "webhooks:prune"}).scalar_one():
            return None
    return partitions.maintain(engine, horizon_days)


def reconcile(settings: Settings, engine: Engine, broker: dramatiq.Broker,
              source: Source | str, since: datetime | None = None) -> reconciliation.Result:
    """One reconciliation run of a source (a provider's name: its default source) with
    its own credentials, recorded in its reconcile_runs row, from `since` or else from
    its last success. An API error is logged and stored; the next interval tries again
    from the last success."""
    if isinstance(source, str):  # a provider's name: its default source
        source = settings.sources.get(source) or settings.default_source(source)
    provider, name = source.provider, source.name
    since = min(reconciliation.since_for_clock(engine, provider, name),
                since or datetime.now(UTC))
    fields = {"provider": provider, "source": source.label}
    try:
        result = reconciliation.reconcile(
            engine, reconciliation.api_for(settings, source), provider, since,
            wake=lambda job_ids: wakeups.wake_jobs(broker, job_ids), source_name=name)
    except reconciliation.ReconcileFailed as error:
        result = error.result  # type: ignore[attr-defined]
        log.error("reconciliation failed", extra={**fields, "error": str(error),
                                                  "recorded": result.recorded})
    except Exception as error:  # recorded as a failed run, so the failure metric shows it
        if db.is_unavailable(error):
            raise
        result = reconciliation.Result(provider, since, source=name, error=describe(error))
        log.exception("reconciliation failed", extra=fields)
    else:
        log.info("reconciled", extra={**fields, "since": since.isoformat(),
                                      "listed": result.listed, "recorded": result.recorded})
    if reconciliation.record_run(engine, result, settings).due_now:
        wakeups.wake_notifications(broker)
    return result


def reconcile_after_failover(settings: Settings, engine: Engine,
                             broker: dramatiq.Broker) -> list[reconciliation.Result]:
    """Reconcile each provider with credentials not yet reconciled since the latest
    failover, over the window before it, and mark those that succeeded. What is due is
    read from the tables each time: a clock restarted mid-way (or another clock) does the
    rest, and a failed run is tried again at the next tick."""
    configured = {(source.provider, source.name): source
                  for source in reconciliation.configured(settings)}
    due = failover.reconciles_due(engine, configured, settings.reconcile_after_failover_hours)
    if due is None:
        return []
    results = []
    for key in due.sources:
        result = reconcile(settings, engine, broker, configured[key], since=due.since)
        if result.error is None:
            failover.mark_reconciled(engine, due.timeline_id, *key)
            log.info("reconciled after the failover",
                     extra={"provider": key[0], "source": configured[key].label,
                            "timeline": due.timeline_id, "since": due.since.isoformat(),
                            "recorded": result.recorded})
        results.append(result)
    return results


def audit(engine: Engine, settings: Settings | None = None,
          broker: dramatiq.Broker | None = None) -> audits.Report | None:
    """One audit of every row, unless another clock is running one (None): each violation
    logged at ERROR, naming its check and rows, and the counts recorded."""
    report = audits.audit_unless_running(engine)
    if report is None:
        return None
    for violation in report.violations:
        log.error("audit: %s", violation.finding.message,
                  extra={"check": violation.check, "provider": violation.provider,
                         "rows": violation.finding.rows})
    if audits.record(engine, report, settings).due_now and broker is not None:
        wakeups.wake_notifications(broker)
    log.info("audited", extra={"violations": len(report.violations),
                               "seconds": round(sum(report.seconds.values()), 3)})
    return report


def beat(settings: Settings) -> Beat:
    """The intervals this clock runs with and the sources it reconciles, for its
    heartbeat: periodic reconciliation is on when its interval is and some source has API
    credentials."""
    scheduled = ([f"{source.provider}/{source.name}"
                  for source in reconciliation.configured(settings)]
                 if settings.reconcile_interval_seconds > 0 else [])
    return Beat(settings.sweep_interval_seconds,
                settings.reconcile_interval_seconds if scheduled else 0.0, tuple(scheduled))


def run(settings: Settings) -> None:
    engine = db.create_engine(settings, pool_size=2, local_commits=True)
    # record_event's engine: each statement its own transaction, committed at once.
    recording = db.create_engine(settings, pool_size=1, autocommit=True, local_commits=True)
    broker = wakeups.create_broker(settings)
    scheduler = BlockingScheduler(timezone="UTC")
    ticks = Ticks()
    scheduler.add_job(_safely(sweep, ticks), "interval",
                      args=(engine, broker, settings, beat(settings)),
                      seconds=settings.sweep_interval_seconds, id="sweep",
                      max_instances=1, coalesce=True, next_run_time=datetime.now(UTC))
    if settings.reconcile_interval_seconds > 0:
        for source in reconciliation.configured(settings):
            scheduler.add_job(_safely(reconcile, ticks), "interval",
                              args=(settings, recording, broker, source),
                              seconds=settings.reconcile_interval_seconds,
                              id=f"reconcile-{source.label}", max_instances=1, coalesce=True,
                              next_run_time=datetime.now(UTC))
    if reconciliation.configured(settings):
        # As often as the sweep that records a new timeline: within a minute of it.
        scheduler.add_job(_safely(reconcile_after_failover, ticks), "interval",
                          args=(settings, recording, broker),
                          seconds=settings.sweep_interval_seconds, id="reconcile-after-failover",
                          max_instances=1, coalesce=True, next_run_time=datetime.now(UTC))
    scheduler.add_job(_safely(prune, ticks), "cron",
                      args=(engine, settings.retention_days, settings.dedup_horizon_days),
                      hour=3, minute=17, id="prune", max_instances=1, coalesce=True)
    scheduler.add_job(_safely(maintain_partitions, ticks), "interval",
                      args=(engine, settings.dedup_horizon_days), hours=1,
                      id="partitions", max_instances=1, coalesce=True,
                      next_run_time=datetime.now(UTC))
    if settings.audit_interval_seconds > 0:
        hooks.load(settings.handler_modules)  # the apps' audit checks
        # The first run soon after start, not an interval later: a clock restarted more
        # often than the interval (every deploy) still audits; not at once, so that a
        # start's sweep and reconciliation go first.
        first = min(settings.audit_interval_seconds, AUDIT_FIRST_AFTER_SECONDS)
        scheduler.add_job(_safely(audit, ticks), "interval", args=(engine, settings, broker),
                          seconds=settings.audit_interval_seconds, id="audit",
                          max_instances=1, coalesce=True,
                          next_run_time=datetime.now(UTC) + timedelta(seconds=first))
    _stop_on_sigterm(scheduler)
    log.info("clock started", extra={"sweep_interval": settings.sweep_interval_seconds})
    try:
        scheduler.start()
    except (KeyboardInterrupt, SystemExit):
        pass
    _finish(ticks, (engine, recording))


def _stop_on_sigterm(scheduler: BlockingScheduler) -> None:
    """SIGTERM stops the scheduler: no tick starts after it, and run() returns once the
    ticks in flight have finished. The clock needs a handler of its own: as a container's
    PID 1 a process gets no default action for SIGTERM, so without one the signal would be
    dropped and the platform would kill the clock at the end of its grace period. A stop
    before the scheduler runs (or a second one) leaves at once, status 0 (starting.leave)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        if not scheduler.running:
            starting.leave()
        scheduler.shutdown(wait=False)

    signal.signal(signal.SIGTERM, stop)


def _finish(ticks: Ticks, engines: tuple[Engine, ...]) -> None:
    """After the scheduler stopped: wait up to STOP_SECONDS for the ticks in flight, then
    close the pools. A tick still running then is cut short (os._exit: its transaction
    rolls back with its connection; every tick is safe to run again), so a stopped clock
    always exits 0, within STOP_SECONDS."""
    if not ticks.wait(STOP_SECONDS):
        log.warning("clock stopped with a tick still running; it rolls back")
        logging.shutdown()
        os._exit(0)
    for engine in engines:
        engine.dispose()
    log.info("clock stopped")


class Ticks:
    """The ticks running now, so that a stopped clock waits for them."""

    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._running = 0

    @contextmanager
    def running(self) -> Iterator[None]:
        with self._idle:
            self._running += 1
        try:
            yield
        finally:
            with self._idle:
                self._running -= 1
                self._idle.notify_all()

    def wait(self, seconds: float) -> bool:
        """True once no tick runs; False if one still does after `seconds`."""
        with self._idle:
            return self._idle.wait_for(lambda: self._running == 0, seconds)


def _safely(task: Callable[..., Any], ticks: Ticks) -> Callable[..., Any]:
    """A failing tick (database down) is logged; the next tick tries again."""

    def tick(*args: Any) -> Any:
        with ticks.running():
            try:
                return task(*args)
            except Exception as error:
                log.warning("%s tick failed: %s", task.__name__, str(error).splitlines()[0])
                return None

    tick.__name__ = task.__name__
    return tick
