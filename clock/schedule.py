"""The clock's schedule, on APScheduler:

- sweep, every SWEEP_INTERVAL_SECONDS (clock/sweep.py);
- prune, nightly: retention (shared/retention.py).

Several clocks running by mistake do no harm: each tick takes a Postgres advisory lock
and skips if another clock holds it, and the work it triggers is idempotent anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.blocking import BlockingScheduler
from sqlalchemy.engine import Engine

from clock.sweep import sweep
from shared import db, queries, retention, wakeups
from shared.settings import Settings

log = logging.getLogger(__name__)


def prune(engine: Engine, days: int) -> int | None:
    """Retention, unless another clock is pruning right now (None)."""
    with engine.begin() as conn:
        if not conn.execute(queries.ClockTryLock, {"name": "webhooks:prune"}).scalar_one():
            return None
    deleted = retention.prune(engine, days)
    log.info("pruned finished events", extra={"deleted": deleted, "days": days})
    return deleted


def run(settings: Settings) -> None:
    engine = db.create_engine(settings, pool_size=2)
    broker = wakeups.create_broker(settings)
    scheduler = BlockingScheduler(timezone="UTC")
    scheduler.add_job(_safely(sweep), "interval", args=(engine, broker),
                      seconds=settings.sweep_interval_seconds, id="sweep",
                      max_instances=1, coalesce=True, next_run_time=datetime.now(UTC))
    scheduler.add_job(_safely(prune), "cron", args=(engine, settings.retention_days),
                      hour=3, minute=17, id="prune", max_instances=1, coalesce=True)
    log.info("clock started", extra={"sweep_interval": settings.sweep_interval_seconds})
    try:
        scheduler.start()
    except (KeyboardInterrupt, SystemExit):
        pass


def _safely(task: Callable[..., Any]) -> Callable[..., Any]:
    """A failing tick (database down) is logged; the next tick tries again."""

    def tick(*args: Any) -> Any:
        try:
            return task(*args)
        except Exception as error:
            log.warning("%s tick failed: %s", task.__name__, str(error).splitlines()[0])
            return None

    tick.__name__ = task.__name__
    return tick
