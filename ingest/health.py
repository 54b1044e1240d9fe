"""Liveness, readiness and metrics endpoints."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from flask import Blueprint, Response, current_app, jsonify

from webhooks.shared import audit, metrics, overview, pausing, providers, queries, reconciliation
from webhooks.shared.models import SWEEP_HEARTBEAT, EmailStatus, JobStatus, NotificationStatus
from webhooks.shared.settings import Settings
from webhooks.shared.sources import Source

log = logging.getLogger(__name__)
blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


@blueprint.get("/readyz")
def readyz() -> tuple[Response, int]:
    try:
        with current_app.extensions["engine"].connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.SQLAlchemyError:
        return jsonify({"status": "database unavailable"}), 503
    return jsonify({"status": "ready"}), 200


@blueprint.get("/metrics")
def metrics_text() -> Response:
    _database_gauges().refresh(current_app.extensions["engine"],
                               current_app.extensions["configured"])
    settings = current_app.extensions["settings"]
    body, content_type = metrics.render(settings.prometheus_multiproc_dir)
    return Response(body, content_type=content_type)


@dataclass(frozen=True)
class Configured:
    """What the gauges show a series of from the first read, before the tables hold a row
    of it (SPEC "Observability": no rule or panel reads a name that is not there): the
    configured sources, the providers the clock reconciles (those with API credentials,
    `reconciliation.configured`), the checks the clock's audit runs (`audit.checks`: the
    core's and the running apps', which `webhooks web` loads at start, as every process
    does). Found once, at the app's start."""

    sources: tuple[Source, ...]
    reconciled: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()


def configured(settings: Settings) -> Configured:
    return Configured(
        tuple(settings.sources),
        tuple(dict.fromkeys(source.provider for source in reconciliation.configured(settings))),
        tuple(dict.fromkeys(name for name, _ in audit.checks(None, audit.DEFAULT_STALE))))


CACHE_SECONDS = 5.0  # the database is read at most this often per server process
# Larger tables: done jobs and sent emails are estimated (the console's overview too).
EXACT_BELOW_ROWS = overview.EXACT_BELOW_ROWS
STATUSES = tuple(str(status) for status in JobStatus)
EMAIL_STATUSES = tuple(str(status) for status in EmailStatus)


class DatabaseGauges:
    """The gauges read from the tables, refreshed at most once per CACHE_SECONDS however
    many scrapers ask: the first scrape after that reads, concurrent ones wait for it and
    serve its figures. One per app (so per server process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_at = -math.inf

    def refresh(self, engine: sa.Engine, configured: Configured) -> None:
        with self._lock:
            if time.monotonic() - self._read_at < CACHE_SECONDS:
                return
            # Also after a failure: in an outage, scrapes do not each wait on a connect.
            self._read_at = time.monotonic()
            try:
                with engine.connect() as conn:
                    _read_gauges(conn, configured)
            except sa.exc.SQLAlchemyError:
                log.warning("metrics: the database could not be read", exc_info=True)


def _database_gauges() -> DatabaseGauges:
    gauges: DatabaseGauges = current_app.extensions.setdefault(
        "database_gauges", DatabaseGauges())
    return gauges


def _source_keys(configured: Sequence[Source]) -> set[tuple[str, str]]:
    """(provider, source) of every configured source (the registry bounds the label
    values) and of every provider's default source, configured or not, as before sources."""
    return ({(source.provider, source.name) for source in configured}
            | {(provider, provider) for provider in providers.PROVIDERS})


def _set_paused(pauses: list[pausing.Pause], keys: set[tuple[str, str]]) -> None:
    for provider, source in sorted(keys):
        metrics.provider_paused.labels(provider, source).set(
            1 if pausing.is_paused(pauses, provider, source) else 0)


def _read_gauges(conn: sa.Connection, configured: Configured) -> None:
    """Queue depth, jobs, emails, the oldest due job, paused providers, reconciliation,
    failovers and the last audit, read from the tables (the truth). Every statement uses
    an index or the statistics except the exact counts, which run only while the tables
    are small (shared/queries.py)."""
    jobs_due = conn.execute(queries.JobCountDue).scalar_one()
    emails_due = conn.execute(queries.OutboxCountDue).scalar_one()
    reconciled = conn.execute(queries.ReconcileRunState).all()
    pauses = pausing.paused(conn)
    failovers = conn.execute(queries.MetricsFailovers).scalar_one()
    rows = {row.relname: float(row.reltuples)
            for row in conn.execute(queries.MetricsTableEstimates)}
    job_counts = _job_counts(conn, rows.get("jobs", -1.0))
    email_counts = _email_counts(conn, rows.get("outbox", -1.0))
    oldest = {(row.provider, row.source): float(row.age)
              for row in conn.execute(queries.MetricsOldestDue)}
    audited = conn.execute(queries.AuditResultsRead).all()
    heartbeats = conn.execute(queries.MetricsClockHeartbeats).all()
    reconcile_ages = conn.execute(queries.MetricsReconcileSourceAges,
                                  {"name": SWEEP_HEARTBEAT}).all()
    notified = {status: count for status, count in conn.execute(queries.NotificationCountByStatus)}

    metrics.database_failovers.set(failovers)
    metrics.queue_depth.labels("jobs").set(jobs_due)
    metrics.queue_depth.labels("outbox").set(emails_due)
    known = set(providers.PROVIDERS) | {provider for provider, _ in job_counts}
    for provider in sorted(known):
        for status in STATUSES:
            metrics.jobs.labels(provider, status).set(job_counts.get((provider, status), 0))
    for status in EMAIL_STATUSES:
        metrics.emails.labels(status).set(email_counts.get(status, 0))
    keys = _source_keys(configured.sources) | set(oldest)
    for key in sorted(keys):
        metrics.oldest_due_job_age.labels(*key).set(max(oldest.get(key, 0.0), 0.0))
    _set_paused(pauses, keys)
    _set_reconciliation(reconciled, configured.reconciled)
    _set_audit(audited, configured.checks)
    for status in NotificationStatus:
        metrics.notifications.labels(status).set(notified.get(status, 0))
    _set_clock(heartbeats, reconcile_ages)


def _set_clock(heartbeats: Sequence[sa.Row[Any]], reconcile_ages: Sequence[sa.Row[Any]]) -> None:
    """The sweeping clock's heartbeat (none before its first sweep), and how stale each
    source it reconciles is."""
    for row in heartbeats:
        if row.name == SWEEP_HEARTBEAT:
            metrics.clock_sweep_age.set(max(float(row.age), 0.0))
            metrics.clock_sweep_interval.set(row.interval_seconds)
            metrics.clock_reconcile_interval.set(row.reconcile_interval_seconds)
    ages = {(row.provider, row.source): max(float(row.age), 0.0) for row in reconcile_ages}
    # A source the clock no longer reconciles reads 0 (fresh), not its last figure frozen.
    shown = {(sample.labels["provider"], sample.labels["source"])
             for family in metrics.reconcile_last_success_age.collect()
             for sample in family.samples}
    for key in sorted(shown | set(ages)):
        metrics.reconcile_last_success_age.labels(*key).set(ages.get(key, 0.0))


def _set_reconciliation(rows: Sequence[sa.Row[Any]], reconciled: Sequence[str]) -> None:
    """Each provider's runs, failures and events found: 0 for a provider the clock
    reconciles before its first run; the last success's time only after one."""
    found = {row.provider: row for row in rows}
    for provider in sorted(set(reconciled) | set(found)):
        row = found.get(provider)
        metrics.reconcile_runs.labels(provider).set(row.runs if row else 0)
        metrics.reconcile_failures.labels(provider).set(row.failures if row else 0)
        metrics.reconciled_events.labels(provider).set(row.found if row else 0)
        if row is not None and row.last_success is not None:
            metrics.reconcile_last_success.labels(provider).set(float(row.last_success))


def _set_audit(rows: Sequence[sa.Row[Any]], checks: Sequence[str]) -> None:
    """The clock's last audit: each check's count, 0 for a check it has not run yet (none
    ran before the first audit), and when it ran (none before the first)."""
    counts = {row.check_name: row.violations for row in rows}
    for check in dict.fromkeys([*checks, *counts]):
        metrics.audit_violations.labels(check).set(counts.get(check, 0))
    if rows:
        metrics.audit_last_run.set(max(float(row.ran_at) for row in rows))


def _job_counts(conn: sa.Connection, estimated_rows: float) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for status, statement in ((str(queries.PENDING), queries.MetricsJobsPending),
                              (str(queries.FAILED), queries.MetricsJobsFailed)):
        for row in conn.execute(statement):
            counts[(row.provider, status)] = int(row.n)
    if estimated_rows < EXACT_BELOW_ROWS:  # includes -1: never analyzed (new, or truncated)
        for row in conn.execute(queries.MetricsJobsDone):
            counts[(row.provider, str(queries.DONE))] = int(row.n)
        return counts
    for row in conn.execute(queries.MetricsJobsProviderShares):
        open_jobs = sum(counts.get((row.provider, status), 0)
                        for status in (str(queries.PENDING), str(queries.FAILED)))
        estimate = round(estimated_rows * float(row.share)) - open_jobs
        counts[(row.provider, str(queries.DONE))] = max(estimate, 0)
    return counts


def _email_counts(conn: sa.Connection, estimated_rows: float) -> dict[str, int]:
    if estimated_rows < EXACT_BELOW_ROWS:  # includes -1: never analyzed
        return {row.status: int(row.n) for row in conn.execute(queries.MetricsOutboxAll)}
    counts = {str(queries.EMAIL_PENDING): conn.execute(queries.MetricsOutboxPending).scalar_one(),
              str(queries.EMAIL_FAILED): conn.execute(queries.MetricsOutboxFailed).scalar_one()}
    counts[str(queries.SENT)] = max(round(estimated_rows) - sum(counts.values()), 0)
    return counts
