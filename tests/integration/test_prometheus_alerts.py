"""A real Prometheus (Debian's binary) scrapes a real `webhooks web` with the alert rules
loaded: a job that fails for real makes WebhookJobsFailed fire, seen through Prometheus's
HTTP API."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from webhooks.shared.settings import Settings
from webhooks.worker import jobs

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
PROMETHEUS = shutil.which("prometheus")

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus is missing (Debian: apt-get install prometheus)")


def prometheus_config(web: str) -> str:
    target = web.removeprefix("http://")
    return f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {RULES}
scrape_configs:
  - job_name: webhooks-web
    static_configs:
      - targets: ["{target}"]
"""


def api(base: str, path: str, **params: str) -> Any:
    answer = requests.get(f"{base}/api/v1/{path}", params=params, timeout=5)
    answer.raise_for_status()
    return answer.json()["data"]


def firing(base: str, name: str) -> list[dict[str, Any]]:
    return [alert for alert in api(base, "alerts")["alerts"]
            if alert["labels"]["alertname"] == name and alert["state"] == "firing"]


def scraped_failed(base: str) -> float | None:
    result = api(base, "query", query='max(webhooks_jobs{provider="stripe",status="failed"})')
    return float(result["result"][0]["value"][1]) if result["result"] else None


@pytest.mark.timeout(180)
def test_a_job_that_fails_for_real_fires_webhook_jobs_failed(
        clean_db: Engine, settings: Settings, tmp_path: Path) -> None:
    assert PROMETHEUS is not None
    env = {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
           "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET}
    with processes.web_server(env, tmp_path / "web.log", workers=1) as web:
        config = tmp_path / "prometheus.yml"
        config.write_text(prometheus_config(web))
        port = processes.free_port()
        base = f"http://127.0.0.1:{port}"
        log = (tmp_path / "prometheus.log").open("ab")
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            processes.wait_http(f"{base}/-/ready", timeout=60)
            # Prometheus has seen no failed job before the failure.
            processes.wait_until(lambda: scraped_failed(base) == 0, timeout=60)
            assert firing(base, "WebhookJobsFailed") == []

            invoice = factories.invoice()
            invoice.pop("amount_paid")  # the handler refuses it: a permanent error
            factories.insert_event_and_job(
                clean_db, factories.stripe_event("invoice.paid", invoice))
            once = dataclasses.replace(settings, job_max_attempts=1)
            assert jobs.process_batch(clean_db, once).failed == 1

            alerts = processes.wait_until(lambda: firing(base, "WebhookJobsFailed"),
                                          timeout=60, interval=0.5)
            assert [alert["labels"]["provider"] for alert in alerts] == ["stripe"]
            assert "webhooks events --status failed" in alerts[0]["annotations"]["description"]
            assert firing(base, "WebhookDatabaseUnavailable") == []
        finally:
            processes.stop(prometheus)
            log.close()
