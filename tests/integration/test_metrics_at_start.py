"""SPEC "Observability": every metric family that a shipped rule (deploy/prometheus) or
dashboard panel (deploy/grafana) reads is on /metrics from a process's start: its HELP and
TYPE at least, and a sample for what is configured. A real `webhooks web`, its processes in
Prometheus's multiprocess mode as deployed (where a family no process has written a sample
of is not shown at all), on an empty database: no delivery, no audit, no clock. Scraped as
soon as /healthz answers.

Every family the rules and the dashboard read is web's: its own ingest counters and the
gauges it reads from the database. None is a worker's counter (those are on the worker's
own /metrics, WORKER_METRICS_PORT); a rule that reads one fails here, not on web's
/metrics."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import Engine

from tests import processes
from tests.conftest import STRIPE_SECRET
from tests.integration.test_alert_rules import rules
from tests.integration.test_dashboard import DASHBOARD, expressions
from tests.metric_names import base_name, metric_names
from webhooks.shared.models import EmailStatus, JobStatus
from webhooks.shared.settings import Settings

# Families whose samples tell of something that has not happened on an empty database with
# no clock: HELP and TYPE only, until it has.
NOT_YET = {
    "webhooks_reconcile_last_success_timestamp_seconds": "no reconciliation has succeeded",
    "webhooks_reconcile_last_success_age_seconds": "no clock names what it reconciles",
    "webhooks_clock_sweep_age_seconds": "no clock has swept",
    "webhooks_clock_sweep_interval_seconds": "no clock has swept",
    "webhooks_clock_reconcile_interval_seconds": "no clock has swept",
}
# An equality matcher in a selector: `webhooks_jobs{status="failed"}`.
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
EQUALS = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


@pytest.fixture(autouse=True)
def _no_folder_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """`webhooks web` makes its own multiprocess folder, as deployed."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)


def env_for(settings: Settings, tmp: Path) -> dict[str, str]:
    """Stripe's default source, reconciled (an API key), and a second source with two
    secrets (a rotation)."""
    return {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
            "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "STRIPE_API_KEY": "sk_test_unused",
            "STRIPE_SOURCES": "connect", "STRIPE_CONNECT_WEBHOOK_SECRET": "whsec_a,whsec_b",
            "TMPDIR": str(tmp)}


def read_names() -> set[str]:
    names: set[str] = set()
    for expr in [str(rule["expr"]) for rule in rules()] + expressions(
            json.loads(DASHBOARD.read_text())):
        names |= metric_names(expr)
    return names


def selectors() -> list[tuple[str, dict[str, str]]]:
    """(name, labels) of every selector with equality matchers in the rules and panels."""
    found = []
    for expr in [str(rule["expr"]) for rule in rules()] + expressions(
            json.loads(DASHBOARD.read_text())):
        for name, matchers in SELECTOR.findall(expr):
            labels = dict(EQUALS.findall(re.sub(r'\w+\s*(=~|!=|!~)\s*"[^"]*"', "", matchers)))
            if labels:
                found.append((name, labels))
    return found


def family_of(families: dict[str, Metric], name: str) -> Metric | None:
    for candidate in (name, base_name(name), name.removesuffix("_total")):
        if candidate in families:
            return families[candidate]
    return None


def has_sample(family: Metric | None, name: str, **labels: str) -> bool:
    return family is not None and any(
        sample.name in (name, family.name) and labels.items() <= sample.labels.items()
        for sample in family.samples)


def audit_checks(env: dict[str, str]) -> set[str]:
    """The checks the clock's audit runs with this environment (the core's and the named
    apps'), asked of a fresh interpreter (this one runs the tests' apps)."""
    code = ("import json; from webhooks.shared import audit, hooks; "
            "from webhooks.shared.settings import "
            "Settings; hooks.load(Settings.from_env().handler_modules); "
            "print(json.dumps([name for name, _ in audit.checks(None, audit.DEFAULT_STALE)]))")
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=processes.ROOT,
                            capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(result.stdout))


def test_every_family_rules_and_panels_read_is_on_web_metrics_from_its_start(
        clean_db: Engine, settings: Settings, tmp_path: Path) -> None:
    env = env_for(settings, tmp_path)
    with processes.web_server(env, tmp_path / "web.log", workers=2) as base:
        text = requests.get(f"{base}/metrics", timeout=10).text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    missing, unnamed, empty = [], [], []
    for name in sorted(read_names()):
        family = family_of(families, name)
        if family is None:
            missing.append(name)
        elif not family.documentation or family.type == "unknown":
            unnamed.append(name)
        elif not family.samples and family.name not in NOT_YET and name not in NOT_YET:
            empty.append(name)
    assert not missing, f"no HELP/TYPE on /metrics at start: {missing}"
    assert not unnamed, f"no HELP or TYPE: {unnamed}"
    assert not empty, f"no sample at start: {empty}"

    # What the rules and panels select by label (reason="signature", status="failed"...).
    unselected = sorted({f"{name}{labels}" for name, labels in selectors()
                         if not has_sample(family_of(families, name), name, **labels)})
    assert not unselected, f"selected but no such series at start: {unselected}"

    # A series at 0 for every configured source, known reason, status and check.
    expected: list[tuple[str, dict[str, str]]] = []
    for source in ("stripe", "connect"):
        labels = {"provider": "stripe", "source": source}
        expected += [("webhooks_deliveries_received_total", labels),
                     ("webhooks_deliveries_duplicate_total", labels),
                     ("webhooks_provider_paused", labels),
                     ("webhooks_oldest_due_job_age_seconds", labels)]
        expected += [("webhooks_deliveries_rejected_total", {**labels, "reason": reason})
                     for reason in ("signature", "payload", "too_large", "body_timeout",
                                    "database", "internal")]
    expected += [("webhooks_signature_verified_total",
                  {"provider": "stripe", "source": "stripe", "secret": "1"}),
                 ("webhooks_signature_verified_total",
                  {"provider": "stripe", "source": "connect", "secret": "2"}),
                 ("webhooks_ack_latency_seconds_bucket", {"provider": "stripe"}),
                 ("webhooks_reconcile_runs", {"provider": "stripe"}),
                 ("webhooks_reconcile_failures", {"provider": "stripe"}),
                 ("webhooks_reconciled_events", {"provider": "stripe"})]
    expected += [("webhooks_jobs", {"provider": "stripe", "status": str(status)})
                 for status in JobStatus]
    expected += [("webhooks_emails", {"status": str(status)}) for status in EmailStatus]
    expected += [("webhooks_queue_depth", {"table": table}) for table in ("jobs", "outbox")]
    absent = [f"{name}{labels}" for name, labels in expected
              if not has_sample(family_of(families, name), name, **labels)]
    assert not absent, f"no series at start: {absent}"

    # The audit's checks, each at 0 before any audit has run.
    checks = audit_checks({**os.environ, **env})
    assert len(checks) >= 4  # the core's three and the reference app's
    audited = families.get("webhooks_audit_violations")
    assert audited is not None, "webhooks_audit_violations is not on /metrics at start"
    shown = {sample.labels["check"]: sample.value for sample in audited.samples}
    assert shown == dict.fromkeys(checks, 0.0)
