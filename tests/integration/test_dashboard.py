"""The Grafana dashboard (deploy/grafana/webhooks.json): a valid dashboard JSON model whose
every query uses metrics that web's /metrics serves (a renamed metric fails this)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.metric_names import assert_on_metrics, metric_names
from webhooks.shared.settings import Settings

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "webhooks.json"


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # collapsed rows hold theirs
    return found


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in panels(dashboard)
            for target in panel.get("targets", [])]


def test_the_dashboard_is_a_valid_grafana_model() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 30
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        assert panel["type"] in {"row", "timeseries", "stat"}
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        for target in panel.get("targets", []):
            assert target["expr"] and target["refId"]
            assert target["datasource"]["type"] == "prometheus"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert "datasource" in variables


def test_the_dashboard_covers_what_on_call_needs() -> None:
    used: set[str] = set()
    for expr in expressions(json.loads(DASHBOARD.read_text())):
        used |= metric_names(expr)
    assert {
        "webhooks_deliveries_received_total", "webhooks_deliveries_duplicate_total",
        "webhooks_ack_latency_seconds_bucket", "webhooks_queue_depth",
        "webhooks_oldest_due_job_age_seconds", "webhooks_jobs", "webhooks_emails",
        "webhooks_reconciled_events", "webhooks_provider_paused",
    } <= used


def test_every_metric_the_dashboard_queries_is_on_metrics(clean_db, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    used: set[str] = set()
    for expr in expressions(json.loads(DASHBOARD.read_text())):
        used |= metric_names(expr)
    assert_on_metrics(used, settings)


def test_metric_names_are_found_in_promql() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, provider) '
            '(rate(webhooks_ack_latency_seconds_bucket{provider="stripe"}[$__rate_interval])))'
            ' + time() - max by (provider) (webhooks_x_total offset 5m)')
    assert metric_names(expr) == {"webhooks_ack_latency_seconds_bucket", "webhooks_x_total"}
