"""The Prometheus alert rules (deploy/prometheus): valid for promtool, their unit tests pass,
and every metric they query exists on web's /metrics."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from shared.settings import Settings
from tests.metric_names import assert_on_metrics, metric_names

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = PROMETHEUS / "alerts.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is missing (Debian: apt-get install prometheus)")

ALERTS = {"WebhookJobsFailed", "WebhookBacklogStale", "WebhookSignatureFailures",
          "WebhookEmailsFailed", "WebhookDatabaseUnavailable",
          "WebhookReconciliationFindsEvents", "WebhookReconciliationFailing"}


def rules() -> list[dict[str, object]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=PROMETHEUS, capture_output=True, text=True,
                          timeout=60, check=False)


@needs_promtool
def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


@needs_promtool
def test_promtool_rule_unit_tests() -> None:
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_there_and_actionable() -> None:
    by_name = {rule["alert"]: rule for rule in rules()}
    assert ALERTS <= set(by_name)
    for name, rule in by_name.items():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        assert annotations.get("summary") and annotations.get("description"), name
        labels = rule["labels"]
        assert isinstance(labels, dict) and labels.get("severity") in {"page", "ticket"}


def test_every_alert_is_unit_tested() -> None:
    document = yaml.safe_load((PROMETHEUS / "alerts_test.yml").read_text())
    firing = {case["alertname"] for test in document["tests"]
              for case in test["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for test in document["tests"]
             for case in test["alert_rule_test"] if not case["exp_alerts"]}
    names = {rule["alert"] for rule in rules()}
    assert firing == names
    assert quiet == names


def test_every_metric_the_rules_query_is_on_metrics(clean_db, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    names: set[str] = set()
    for rule in rules():
        names |= metric_names(str(rule["expr"]))
    assert "webhooks_jobs" in names and "webhooks_deliveries_rejected_total" in names
    assert_on_metrics(names, settings)
