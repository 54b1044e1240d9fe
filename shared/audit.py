"""The audit (`webhooks audit`, and the clock's hourly run): the invariants that
exactly-once leaves behind, checked in a live database, each violation naming its rows.

The core's own checks, in this order (their statements are in shared/queries.py):

- `event jobs`: every event has its job (EventJobInsert writes both in one statement,
  retention drops both);
- `email message ids`: every `sent` email has Postmark's message id;
- `due jobs`: no job has been due (pending, its run_at passed) for longer than `stale`
  while its provider is not paused;

then every check an app registered beside its handlers (shared.hooks.audit_check: every
`done` job's effects are there; the reference app's are in webhooks/ledger/hooks.py).

All of them run in ONE transaction, REPEATABLE READ and READ ONLY (queries.AuditSnapshot):
one snapshot, so a job and the effects committed with it are seen together, and nothing is
written, however the checks are written. `since` limits each check to the rows recorded
since then.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.engine import Connection, Engine

from webhooks.shared import db, hooks, notifications, queries
from webhooks.shared.hooks import Finding, Violation
from webhooks.shared.settings import Settings

DEFAULT_STALE = timedelta(minutes=15)
CLOCK_LOCK = "webhooks:audit"  # one clock at a time runs it (queries.ClockTryLock)
EVENT_JOBS, EMAIL_MESSAGE_IDS, DUE_JOBS = "event jobs", "email message ids", "due jobs"

Check = Callable[[Connection], list[Violation]]


@dataclass(frozen=True)
class Report:
    """What one audit found. `counts`: every check that ran, by name, and how many
    violations it found (0: it held); `seconds`: how long each took."""

    violations: list[Violation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def audit(engine: Engine, *, since: datetime | None = None,
          stale: timedelta = DEFAULT_STALE) -> Report:
    """Every check, the core's then the registered ones, in one read-only snapshot."""
    with _snapshot(engine) as conn:
        return _run(conn, checks(since, stale))


def audit_unless_running(engine: Engine, stale: timedelta = DEFAULT_STALE) -> Report | None:
    """The clock's audit of every row; None when another clock is running one (CLOCK_LOCK,
    held until the snapshot's transaction ends)."""
    with _snapshot(engine) as conn:
        if not conn.execute(queries.ClockTryLock, {"name": CLOCK_LOCK}).scalar_one():
            return None
        return _run(conn, checks(None, stale))


@contextmanager
def _snapshot(engine: Engine) -> Iterator[Connection]:
    with db.transaction(engine) as conn:
        conn.execute(queries.AuditSnapshot)  # must be the transaction's first statement
        yield conn


def checks(since: datetime | None, stale: timedelta) -> list[tuple[str, Check]]:
    """(name, check) of the core's checks, then of every registered one."""
    core: list[tuple[str, Check]] = [
        (EVENT_JOBS, lambda conn: list(event_jobs(conn, since))),
        (EMAIL_MESSAGE_IDS, lambda conn: list(email_message_ids(conn, since))),
        (DUE_JOBS, lambda conn: list(due_jobs(conn, since, stale))),
    ]
    return core + [(name, _registered(provider, name, since))
                   for provider, name in hooks.audit_checks()]


def _registered(provider: str, name: str, since: datetime | None) -> Check:
    return lambda conn: hooks.run_audit_check(conn, provider, name, since)


def _run(conn: Connection, named: list[tuple[str, Check]]) -> Report:
    report = Report()
    for name, check in named:
        started = time.perf_counter()
        found = check(conn)
        report.seconds[name] = report.seconds.get(name, 0.0) + time.perf_counter() - started
        report.counts[name] = report.counts.get(name, 0) + len(found)
        report.violations.extend(found)
    return report


def event_jobs(conn: Connection, since: datetime | None) -> Iterator[Violation]:
    for row in conn.execute(queries.AuditEventsWithoutJob, {"since": since}):
        yield Violation(EVENT_JOBS, row.provider, Finding(
            f"{row.provider} event {row.event_id} ({row.event_type}, received "
            f"{row.received_at.isoformat()}) has no job",
            {"webhook_events": {"provider": row.provider, "event_id": row.event_id}}))


def email_message_ids(conn: Connection, since: datetime | None) -> Iterator[Violation]:
    for row in conn.execute(queries.AuditSentWithoutMessageId, {"since": since}):
        yield Violation(EMAIL_MESSAGE_IDS, row.provider or "", Finding(
            f"email {row.id} ({row.kind}, key {row.idempotency_key}) is sent without "
            "Postmark's message id",
            {"outbox": {"id": row.id, "idempotency_key": row.idempotency_key}}))


def due_jobs(conn: Connection, since: datetime | None,
             stale: timedelta) -> Iterator[Violation]:
    params = {"since": since, "stale": stale.total_seconds()}
    for row in conn.execute(queries.AuditJobsDueTooLong, params):
        yield Violation(DUE_JOBS, row.provider, Finding(
            f"job {row.id} ({row.provider} {row.event_type} {row.event_id}, attempts "
            f"{row.attempts}) has been due for {round(row.due_seconds)} s, longer than "
            f"{round(stale.total_seconds())} s",
            {"jobs": {"id": row.id, "provider": row.provider, "event_id": row.event_id}}))


def record(engine: Engine, report: Report,
           settings: Settings | None = None) -> notifications.Queued:
    """The clock's record of a run, in its own transaction: each check's count replaces
    the last run's (audit_results, shown by web's /metrics as webhooks_audit_violations).

    With settings, a report with violations records its `audit.violation` notification
    in this transaction too (SPEC "Notifications"), beside the counts: the count of
    violations, the checks that found them and the first one's message."""
    names = list(report.counts)
    with db.transaction(engine) as conn:
        conn.execute(queries.AuditResultsReplace,
                     {"checks": names, "counts": [report.counts[name] for name in names]})
        if settings is None or not report.violations:
            return notifications.Queued()
        failed = sorted(name for name, count in report.counts.items() if count)
        return notifications.record(conn, settings, [notifications.Occurrence(
            notifications.Kind.AUDIT_VIOLATION, count=len(report.violations),
            samples=failed[:notifications.SAMPLES],
            error=report.violations[0].finding.message)])
