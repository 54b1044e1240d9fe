"""The console's state for one request: what create_blueprint was given, reached from the
pages through `current()`, and the read transaction every page uses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import dramatiq
import sqlalchemy as sa
from flask import g
from sqlalchemy.engine import Connection, Engine

from webhooks.console.auth import Guard
from webhooks.console.settings import ConsoleSettings
from webhooks.shared import db, wakeups

READ_TIMEOUT = "15s"  # a page's queries; a runaway search must not hold a connection


@dataclass(frozen=True)
class Console:
    """What the pages need: the database, the broker to wake workers (optional: without
    it the clock's sweeper picks replayed work up), the settings and the guard; and the
    configured sources, (provider, name), which the overview lists before their first
    event."""

    engine: Engine
    settings: ConsoleSettings
    guard: Guard
    broker: dramatiq.Broker | None = None
    sources: tuple[tuple[str, str], ...] = ()

    def wake_jobs(self, job_ids: list[int]) -> None:
        """Best effort: one wake-up per claim's worth of jobs (each claim takes up to
        JOBS_PER_MESSAGE due jobs and keeps draining while more are due)."""
        if self.broker is not None and job_ids:
            wakeups.wake_jobs(self.broker, job_ids)

    def wake_due(self, due: int) -> None:
        """Best effort: wake-ups for `due` jobs (after a resume)."""
        if self.broker is not None and due:
            wakeups.wake_due_jobs(self.broker, due)

    def wake_outbox(self) -> None:
        if self.broker is not None:
            wakeups.wake_outbox(self.broker)


def current() -> Console:
    console: Console = g.webhooks_console
    return console


@contextmanager
def reading() -> Iterator[Connection]:
    """A read-only transaction with a statement timeout, without JIT compilation: a page's
    queries read few rows, but a join the planner misjudges (the chart's generate_series,
    guessed at 1,000 hours) crossed the JIT cost threshold on a large table, and compiling
    cost the overview several times its queries."""
    with db.transaction(current().engine) as conn:
        conn.execute(sa.text("SET TRANSACTION READ ONLY"))
        conn.execute(sa.text(f"SET LOCAL statement_timeout = '{READ_TIMEOUT}'"))
        conn.execute(sa.text("SET LOCAL jit = off"))
        yield conn


