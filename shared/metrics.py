"""Prometheus metrics for web, worker and clock.

Several server or worker processes: set PROMETHEUS_MULTIPROC_DIR (the `webhooks web` and
`webhooks worker` commands do it for you) and every process's samples are aggregated on
/metrics.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# The ingest's counters carry `source`, the source's name (the provider's for its default
# source): its values are the configured sources (shared/sources.py) and "unknown", so a
# path nobody configured adds no series.
deliveries_received = Counter(
    "webhooks_deliveries_received_total", "Verified deliveries recorded (new events).",
    ["provider", "source"],
)
deliveries_duplicate = Counter(
    "webhooks_deliveries_duplicate_total", "Verified deliveries of an event seen before.",
    ["provider", "source"],
)
deliveries_rejected = Counter(
    "webhooks_deliveries_rejected_total", "Deliveries answered 4xx or 503, by reason.",
    ["provider", "source", "reason"],
)
# Secret rotation: which configured secret verified each delivery, by its 1-based position
# in the comma-separated variable (never the secret). The old secret is safe to remove once
# its position stops counting for longer than the provider's retry window.
signature_verified = Counter(
    "webhooks_signature_verified_total", "Deliveries whose signature verified, by the "
    "position of the secret that verified it.", ["provider", "source", "secret"],
)
ack_latency = Histogram(
    "webhooks_ack_latency_seconds", "Time from request start to acknowledgement.",
    ["provider"],
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
broker_enqueue_failures = Counter(
    "webhooks_broker_enqueue_failures_total", "Wake-ups that could not be enqueued."
)
jobs_done = Counter("webhooks_jobs_done_total", "Jobs completed.", ["provider", "event_type"])
jobs_retried = Counter("webhooks_jobs_retried_total", "Job attempts that failed and will retry.")
jobs_failed = Counter("webhooks_jobs_failed_total", "Jobs that failed for good.")
job_claims = Counter(
    "webhooks_job_claims_total", "Job batches' claims, by what they found: `none` is a "
    "wake-up spent on a claim that found no due job (another batch had taken them).",
    ["found"],
)
job_latency = Histogram(
    "webhooks_job_latency_seconds", "Time from receipt of the event to its job done.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60, 300),
)
outbox_sent = Counter("webhooks_outbox_sent_total", "Emails sent (or found already sent).")
outbox_failed = Counter("webhooks_outbox_failed_total", "Emails failed for good.")
# Notification deliveries (worker/notify.py) failed for good, by channel: slack, email,
# webhook. The notification is then `failed`; webhooks_notifications shows how many.
notifications_failed = Counter(
    "webhooks_notifications_failed_total", "Notification deliveries failed for good (a "
    "permanent refusal, or attempts exhausted), by channel.", ["channel"],
)
notifications = Gauge(
    "webhooks_notifications", "Notifications by status, read from the database.",
    ["status"], multiprocess_mode="mostrecent",
)
queue_depth = Gauge(
    "webhooks_queue_depth", "Due pending rows, read from the tables at scrape time.", ["table"],
    multiprocess_mode="mostrecent",
)
provider_paused = Gauge(
    "webhooks_provider_paused", "1 while the source is paused (`webhooks pause PROVIDER` or "
    "`PROVIDER/SOURCE`): its deliveries are recorded, its jobs wait.", ["provider", "source"],
    multiprocess_mode="mostrecent",
)
# Reconciliation, read from the database at scrape time (the clock runs it; the web shows).
reconcile_runs = Gauge(
    "webhooks_reconcile_runs", "Reconciliation runs, by provider (only grows).",
    ["provider"], multiprocess_mode="mostrecent",
)
reconcile_failures = Gauge(
    "webhooks_reconcile_failures", "Reconciliation runs that ended on an API error "
    "(only grows).", ["provider"], multiprocess_mode="mostrecent",
)
reconcile_last_success = Gauge(
    "webhooks_reconcile_last_success_timestamp_seconds",
    "When the last successful reconciliation run started.", ["provider"],
    multiprocess_mode="mostrecent",
)
reconciled_events = Gauge(
    "webhooks_reconciled_events", "Events that only reconciliation found (never delivered "
    "before it): a sign that deliveries go missing.", ["provider"],
    multiprocess_mode="mostrecent",
)
reconcile_last_success_age = Gauge(
    "webhooks_reconcile_last_success_age_seconds", "Seconds since the last successful "
    "reconciliation run of the source started, by the database's clock; only for the "
    "sources the clock reconciles periodically (none when that is off).",
    ["provider", "source"], multiprocess_mode="mostrecent",
)
# The clock's heartbeat (clock_heartbeats, stamped by each sweep), read at scrape time: a
# stopped clock makes no other sound. Absent before the first sweep of a clock.
clock_sweep_age = Gauge(
    "webhooks_clock_sweep_age_seconds", "Seconds since the clock's last sweep, by the "
    "database's clock.", multiprocess_mode="mostrecent",
)
clock_sweep_interval = Gauge(
    "webhooks_clock_sweep_interval_seconds", "The sweeping clock's SWEEP_INTERVAL_SECONDS.",
    multiprocess_mode="mostrecent",
)
clock_reconcile_interval = Gauge(
    "webhooks_clock_reconcile_interval_seconds", "The sweeping clock's "
    "RECONCILE_INTERVAL_SECONDS; 0 when it reconciles nothing periodically (the interval "
    "is 0, or no source has API credentials).", multiprocess_mode="mostrecent",
)
# Read from database_timelines at scrape time: exact, and kept across restarts and
# clocks (shared/failover.py). The first timeline recorded is the start, not counted.
database_failovers = Gauge(
    "webhooks_database_failovers_total", "Database failovers seen (a new timeline of the "
    "server, after the first one recorded); each is followed by a reconciliation of every "
    "provider with credentials.", multiprocess_mode="mostrecent",
)
# The clock's last audit (shared/audit.py), read from audit_results at scrape time.
audit_violations = Gauge(
    "webhooks_audit_violations", "Violations the clock's last audit found, by check (0: it "
    "held); `webhooks audit` names them.", ["check"], multiprocess_mode="mostrecent",
)
audit_last_run = Gauge(
    "webhooks_audit_last_run_timestamp_seconds", "When the clock's last audit ran.",
    multiprocess_mode="mostrecent",
)

# Jobs and emails, read from the database by web's /metrics (ingest/health.py, cached a few
# seconds): the whole system's truth in one scrape, whichever process did the work.
jobs = Gauge(
    "webhooks_jobs", "Jobs by provider and status, read from the database. pending and "
    "failed are exact; done is exact while the jobs table holds under 100,000 rows, and "
    "beyond that an ESTIMATE from Postgres's statistics (pg_class.reltuples times the "
    "provider's share in pg_stats, less its pending and failed jobs).",
    ["provider", "status"], multiprocess_mode="mostrecent",
)
emails = Gauge(
    "webhooks_emails", "Outbox emails by status, read from the database. pending and failed "
    "are exact; sent is exact while the outbox holds under 100,000 rows, and beyond that "
    "an ESTIMATE (pg_class.reltuples less pending and failed).",
    ["status"], multiprocess_mode="mostrecent",
)
oldest_due_job_age = Gauge(
    "webhooks_oldest_due_job_age_seconds", "Seconds since the oldest due job (pending, its "
    "run_at passed, its source not paused) became due, by source; 0 with none. Exact.",
    ["provider", "source"], multiprocess_mode="mostrecent",
)


# Every family declared above: on /metrics from a process's start, samples or not.
DECLARED: tuple[Counter | Gauge | Histogram, ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, Counter | Gauge | Histogram))


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def render(multiprocess_dir: Path | None) -> tuple[bytes, str]:
    """The exposition text for /metrics, aggregated over the processes that share
    multiprocess_dir (PROMETHEUS_MULTIPROC_DIR) when there is one.

    Every family in DECLARED is there from the start (SPEC "Observability": no rule or
    panel reads a name that is not there), its samples those the processes wrote. Without
    the folder the registry shows them all (a labelled family with no series: its HELP and
    TYPE). With it, the MultiProcessCollector shows only what some process wrote to its
    files, so a family none has written yet gets its HELP and TYPE here; the series a
    process knows from its configuration it creates at its start (ingest/app.py)."""
    if multiprocess_dir is None:
        return generate_latest(), CONTENT_TYPE_LATEST
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    written = list(registry.collect())
    shown = {family.name for family in written}
    unwritten = [family for metric in DECLARED for family in metric.describe()
                 if family.name not in shown]
    return generate_latest(_Families(written + unwritten)), CONTENT_TYPE_LATEST
