"""The whole alerting path for real: Debian's Prometheus scrapes a real `webhooks web` with
the shipped rules and sends to Debian's Alertmanager started with the shipped
configuration (deploy/alertmanager/alertmanager.yml), its receivers pointed at fakes on
loopback (tests/fakes/alert_receivers.py) and its waits shortened, in the test's copy only.

- A job that fails for real reaches the fake Slack as WebhookJobsFailed; the Watchdog
  reaches the dead man's switch again and again, and nothing else does.
- With the database stopped (a Postgres of the test's own), WebhookDatabaseUnavailable
  reaches Slack and the symptoms it inhibits do not, though Prometheus fires them and
  Alertmanager holds them (suppressed). web cannot read the database then, so its gauges
  keep their last figures: the test's copy of the rules gives the symptoms a `for`, so that
  they are pending when the database stops and fire while it is down, after the database
  alert, as an outage's symptoms do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
import sqlalchemy as sa
import yaml
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.acceptance.harness import PrivatePostgres
from tests.conftest import STRIPE_SECRET, broker_url, migrate
from tests.fakes.alert_receivers import FakeAlertReceivers, slack_alertnames, webhook_alertnames
from webhooks.shared.settings import Settings
from webhooks.worker import jobs

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or ALERTMANAGER is None,
    reason="prometheus or alertmanager is missing "
           "(Debian: apt-get install prometheus prometheus-alertmanager)")

# What WebhookDatabaseUnavailable inhibits (SPEC "Notifications").
SYMPTOMS = ("WebhookJobsFailed", "WebhookBacklogStale", "WebhookEmailsFailed")
SLACK_PAGE = "/slack/page"
DEADMANSSWITCH = "/webhook/deadmansswitch"


def alertmanager_config(receivers: str) -> str:
    """The shipped configuration, its receivers at the fakes (no mail server here: email
    is left out) and its waits in seconds rather than minutes."""
    config = yaml.safe_load((DEPLOY / "alertmanager" / "alertmanager.yml").read_text())
    for receiver in config["receivers"]:
        receiver.pop("email_configs", None)
        for slack in receiver.get("slack_configs", []):
            slack["api_url"] = f"{receivers}/slack/{receiver['name']}"
        for webhook in receiver.get("webhook_configs", []):
            webhook["url"] = f"{receivers}/webhook/{receiver['name']}"
    for route in [config["route"], *config["route"]["routes"]]:
        watchdog = route.get("matchers") == ['alertname="Watchdog"']
        route.update(group_wait="0s" if watchdog else "1s", group_interval="1s",
                     repeat_interval="2s" if watchdog else "1h")
    return yaml.safe_dump(config, sort_keys=False)


def rules(pending: str | None) -> str:
    """The shipped rules; pending: a `for` for the symptoms, so that the test can have
    them pending when the database stops and firing while it is down."""
    document = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if pending is not None and rule["alert"] in SYMPTOMS:
                rule["for"] = pending
    return yaml.safe_dump(document, sort_keys=False)


def prometheus_config(web: str, alertmanager: str, rules_file: Path) -> str:
    return f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {rules_file}
alerting:
  alertmanagers:
    - static_configs:
        - targets: ["{alertmanager.removeprefix('http://')}"]
scrape_configs:
  - job_name: webhooks-web
    static_configs:
      - targets: ["{web.removeprefix('http://')}"]
"""


@dataclasses.dataclass
class Alerting:
    web: str
    prometheus: str
    alertmanager: str
    receivers: FakeAlertReceivers

    def alerts(self, name: str, state: str) -> list[dict[str, Any]]:
        """Prometheus's alerts of that name in that state (pending, firing)."""
        answer = requests.get(f"{self.prometheus}/api/v1/alerts", timeout=5)
        answer.raise_for_status()
        return [alert for alert in answer.json()["data"]["alerts"]
                if alert["labels"]["alertname"] == name and alert["state"] == state]

    def held(self, name: str) -> list[dict[str, Any]]:
        """Alertmanager's alerts of that name (with their status: active, suppressed)."""
        answer = requests.get(f"{self.alertmanager}/api/v2/alerts",
                              params={"filter": f'alertname="{name}"'}, timeout=5)
        answer.raise_for_status()
        alerts: list[dict[str, Any]] = answer.json()
        return alerts

    def slack(self) -> list[str]:
        return [name for post in self.receivers.posts(SLACK_PAGE)
                for name in slack_alertnames(post.body)]

    def gauge(self, query: str) -> float | None:
        answer = requests.get(f"{self.prometheus}/api/v1/query", params={"query": query},
                              timeout=5)
        answer.raise_for_status()
        result = answer.json()["data"]["result"]
        return float(result[0]["value"][1]) if result else None


def daemon(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("ab")
    return subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT,
                            start_new_session=True)


@contextlib.contextmanager
def alerting(database_url: str, tmp_path: Path, pending: str | None = None) -> Iterator[Alerting]:
    """web on database_url, Alertmanager with the shipped configuration, Prometheus with
    the shipped rules scraping web and sending to Alertmanager, the fake receivers."""
    assert PROMETHEUS is not None and ALERTMANAGER is not None
    env = {"DATABASE_URL": database_url, "BROKER_URL": broker_url(),
           "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET}
    started: list[subprocess.Popen[bytes]] = []
    with FakeAlertReceivers() as receivers, processes.web_server(
            env, tmp_path / "web.log", workers=1) as web:
        try:
            am_port, prom_port = processes.free_port(), processes.free_port()
            am_config = tmp_path / "alertmanager.yml"
            am_config.write_text(alertmanager_config(receivers.url))
            started.append(daemon(
                [ALERTMANAGER, f"--config.file={am_config}",
                 f"--storage.path={tmp_path / 'am'}",
                 f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="],
                tmp_path / "alertmanager.log"))
            am = f"http://127.0.0.1:{am_port}"
            rules_file = tmp_path / "alerts.yml"
            rules_file.write_text(rules(pending))
            prom_config = tmp_path / "prometheus.yml"
            prom_config.write_text(prometheus_config(web, am, rules_file))
            started.append(daemon(
                [PROMETHEUS, f"--config.file={prom_config}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}",
                 # Alerts evaluated before the notifier has found Alertmanager are dropped
                 # and sent again after this delay (1m by default).
                 "--rules.alert.resend-delay=1s"],
                tmp_path / "prometheus.log"))
            prom = f"http://127.0.0.1:{prom_port}"
            processes.wait_http(f"{am}/-/ready", timeout=60)
            processes.wait_http(f"{prom}/-/ready", timeout=60)
            yield Alerting(web, prom, am, receivers)
        finally:
            for process in reversed(started):
                processes.stop(process)


def deliver(web: str, event_id: str) -> int:
    body = json.dumps(factories.stripe_event("invoice.paid", factories.invoice(),
                                             event_id=event_id)).encode()
    answer = requests.post(f"{web}/webhooks/stripe", data=body, timeout=15, headers={
        "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET),
        "Content-Type": "application/json"})
    return answer.status_code


@pytest.mark.timeout(120)
def test_a_failed_job_reaches_slack_and_the_watchdog_the_dead_mans_switch(
        clean_db: Engine, settings: Settings, tmp_path: Path) -> None:
    with alerting(settings.database_url or "", tmp_path) as path:
        scraped = 'max(webhooks_jobs{provider="stripe",status="failed"})'
        processes.wait_until(lambda: path.gauge(scraped) == 0, timeout=30, interval=0.3)

        invoice = factories.invoice()
        invoice.pop("amount_paid")  # the handler refuses it: a permanent error
        factories.insert_event_and_job(clean_db, factories.stripe_event("invoice.paid", invoice))
        once = dataclasses.replace(settings, job_max_attempts=1)
        assert jobs.process_batch(clean_db, once).failed == 1

        processes.wait_until(lambda: "WebhookJobsFailed" in path.slack(), timeout=40,
                             interval=0.3)
        message = next(post.body for post in path.receivers.posts(SLACK_PAGE)
                       if "WebhookJobsFailed" in slack_alertnames(post.body))
        text = json.dumps(message)
        assert "stripe: a webhook job failed for good" in text
        assert "webhooks events --status failed --provider stripe" in text
        assert message["channel"] == "#webhooks-oncall"

        # The dead man's switch hears the Watchdog again and again (every 2 s here), and
        # nothing but it; Slack never hears the Watchdog.
        beats = processes.wait_until(
            lambda: len(path.receivers.posts(DEADMANSSWITCH)) >= 3 and path.receivers.posts(
                DEADMANSSWITCH), timeout=30, interval=0.3)
        assert {name for post in beats for name in webhook_alertnames(post.body)} == {
            "Watchdog"}
        assert {post.body["status"] for post in beats} == {"firing"}
        spacing = [b.at - a.at for a, b in itertools.pairwise(beats)]
        assert all(gap > 0.5 for gap in spacing), spacing  # repeats, not a burst
        assert "Watchdog" not in path.slack()


@pytest.fixture()
def own_postgres() -> Iterator[PrivatePostgres]:
    """A Postgres of the test's own, which it may stop (never the machine's)."""
    server = PrivatePostgres()
    try:
        server.create()
        migrate(server.url.replace("postgresql://", "postgresql+psycopg://"))
        yield server
    finally:
        server.destroy()


def symptoms(engine: Engine) -> None:
    """A job failed, an email failed and a job due for 20 minutes, all at once."""
    factories.insert_event_and_job(
        engine, factories.stripe_event("invoice.paid", factories.invoice(),
                                       event_id="evt_failed"), status="failed")
    factories.insert_event_and_job(
        engine, factories.stripe_event("invoice.paid", factories.invoice(),
                                       event_id="evt_waiting"),
        run_at=datetime.now(UTC) - timedelta(minutes=20))
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO outbox (idempotency_key, kind, to_address, subject, text_body,"
            " html_body, status) VALUES ('k-failed', 'receipt', 'a@example.com', 's', 't',"
            " 'h', 'failed')"))


@pytest.mark.timeout(150)
def test_with_the_database_stopped_only_the_database_alert_is_sent(
        own_postgres: PrivatePostgres, tmp_path: Path) -> None:
    engine = sa.create_engine(own_postgres.url.replace("postgresql://", "postgresql+psycopg://"),
                              poolclass=sa.pool.NullPool)
    stop_sending = threading.Event()
    answers: list[int] = []

    def keep_delivering(web: str) -> None:  # as a provider does, every half second
        count = 0
        while not stop_sending.wait(0.5):
            count += 1
            with contextlib.suppress(requests.RequestException):
                answers.append(deliver(web, f"evt_outage_{count}"))

    # The symptoms wait 20 s pending: long enough for the database alert to reach
    # Alertmanager first, as it does in an outage whose symptoms follow it.
    with alerting(own_postgres.url, tmp_path, pending="20s") as path:
        for query in ('max(webhooks_jobs{status="failed"})',
                      'max(webhooks_emails{status="failed"})'):
            processes.wait_until(lambda q=query: path.gauge(q) == 0, timeout=30,
                                 interval=0.3)
        symptoms(engine)
        processes.wait_until(lambda: all(path.alerts(name, "pending") for name in SYMPTOMS),
                             timeout=30, interval=0.3)

        own_postgres.stop("immediate")
        sender = threading.Thread(target=keep_delivering, args=(path.web,), daemon=True)
        sender.start()
        try:
            processes.wait_until(lambda: "WebhookDatabaseUnavailable" in path.slack(),
                                 timeout=30, interval=0.3)
            # The symptoms fire in Prometheus while the database is down (web keeps their
            # last figures) and reach Alertmanager, which holds them back.
            processes.wait_until(
                lambda: all(path.alerts(name, "firing") for name in SYMPTOMS)
                and all(alert["status"]["state"] == "suppressed"
                        for name in SYMPTOMS for alert in path.held(name))
                and all(path.held(name) for name in SYMPTOMS), timeout=45, interval=0.5)
            for name in SYMPTOMS:
                for alert in path.held(name):
                    assert alert["status"]["inhibitedBy"], (name, alert["status"])
            # Several group intervals (1 s here) later, still nothing but the database:
            # two more Watchdog beats are at least 2 s.
            beats = len(path.receivers.posts(DEADMANSSWITCH))
            processes.wait_until(lambda: len(path.receivers.posts(DEADMANSSWITCH)) >= beats + 2,
                                 timeout=15, interval=0.3)
            sent = path.slack()
            assert "WebhookDatabaseUnavailable" in sent
            assert not set(sent) & set(SYMPTOMS), sent
            assert set(answers) == {503}, answers
        finally:
            stop_sending.set()
            sender.join(20)
    engine.dispose()
