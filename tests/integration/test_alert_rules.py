"""The Prometheus alert rules (deploy/prometheus): valid for promtool, their unit tests pass,
and every metric they query exists on web's /metrics. The Alertmanager configuration
(deploy/alertmanager): valid for amtool, and it routes each rule's alerts by severity, the
Watchdog to the dead man's switch."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.metric_names import assert_on_metrics, metric_names
from webhooks.shared.settings import Settings

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = PROMETHEUS / "alerts.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is missing (Debian: apt-get install prometheus)")
ALERTMANAGER = PROMETHEUS.parent / "alertmanager" / "alertmanager.yml"
AMTOOL = shutil.which("amtool")
needs_amtool = pytest.mark.skipif(
    AMTOOL is None,
    reason="amtool is missing (Debian: apt-get install prometheus-alertmanager)")

ALERTS = {"WebhookJobsFailed", "WebhookBacklogStale", "WebhookSignatureFailures",
          "WebhookEmailsFailed", "WebhookDatabaseUnavailable",
          "WebhookReconciliationFindsEvents", "WebhookReconciliationFailing",
          "WebhookClockStopped", "WebhookReconciliationStale", "Watchdog"}
ALWAYS_FIRING = {"Watchdog"}  # never quiet, severity none: the dead man's switch
RECEIVERS = {"page": "page", "ticket": "ticket", "none": "deadmansswitch"}


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
        severities = {"none"} if name in ALWAYS_FIRING else {"page", "ticket"}
        assert isinstance(labels, dict) and labels.get("severity") in severities, name


def test_every_alert_is_unit_tested() -> None:
    document = yaml.safe_load((PROMETHEUS / "alerts_test.yml").read_text())
    firing = {case["alertname"] for test in document["tests"]
              for case in test["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for test in document["tests"]
             for case in test["alert_rule_test"] if not case["exp_alerts"]}
    names = {rule["alert"] for rule in rules()}
    assert firing == names
    assert quiet == names - ALWAYS_FIRING


def test_the_watchdog_always_fires() -> None:
    watchdog = next(rule for rule in rules() if rule["alert"] == "Watchdog")
    assert str(watchdog["expr"]).strip() == "vector(1)" and "for" not in watchdog


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert AMTOOL is not None
    return subprocess.run([AMTOOL, *args], capture_output=True, text=True, timeout=60,
                          check=False)


@needs_amtool
def test_amtool_check_config() -> None:
    result = amtool("check-config", str(ALERTMANAGER))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_amtool
def test_every_alert_is_routed_by_its_severity() -> None:
    for rule in rules():
        labels = {**rule["labels"], "alertname": rule["alert"]}  # type: ignore[dict-item]
        if rule["alert"] != "Watchdog":
            labels |= {"provider": "stripe", "source": "stripe"}
        result = amtool("config", "routes", "test", f"--config.file={ALERTMANAGER}",
                        *(f"{key}={value}" for key, value in labels.items()))
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.strip() == RECEIVERS[str(labels["severity"])], rule["alert"]


def test_the_database_alert_inhibits_its_symptoms_on_no_label() -> None:
    """SPEC: while WebhookDatabaseUnavailable fires, the jobs, backlog and emails alerts
    are not sent; no `equal` label, which the database alert lacks."""
    config = yaml.safe_load(ALERTMANAGER.read_text())
    inhibiting = [rule for rule in config["inhibit_rules"]
                  if rule["source_matchers"] == ['alertname="WebhookDatabaseUnavailable"']]
    assert len(inhibiting) == 1 and not inhibiting[0].get("equal")
    target = inhibiting[0]["target_matchers"]
    assert target == ['alertname=~"WebhookJobsFailed|WebhookBacklogStale|WebhookEmailsFailed"']
    for rule in config["inhibit_rules"]:
        assert "Watchdog" not in str(rule["target_matchers"])
    watchdog = next(route for route in config["route"]["routes"]
                    if route["matchers"] == ['alertname="Watchdog"'])
    assert watchdog["group_wait"] == "0s" and watchdog["repeat_interval"] in {"1m", "2m", "5m"}


def test_every_metric_the_rules_query_is_on_metrics(clean_db, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    names: set[str] = set()
    for rule in rules():
        names |= metric_names(str(rule["expr"]))
    assert "webhooks_jobs" in names and "webhooks_deliveries_rejected_total" in names
    assert_on_metrics(names, settings)
