"""The fake Slack incoming webhook (tests/fakes/alert_receivers.py), driven by Slack's own
client (slack_sdk's WebhookClient): it answers as Slack does, and records what Slack would
get, so the alerting test's fake is only as lenient as Slack."""

from __future__ import annotations

import requests
from slack_sdk.webhook import WebhookClient

from tests.fakes.alert_receivers import FakeAlertReceivers, slack_alertnames, webhook_alertnames


def test_slacks_client_is_answered_as_slack_answers() -> None:
    with FakeAlertReceivers() as fake:
        client = WebhookClient(f"{fake.url}/slack/page")
        sent = client.send(text="hello", attachments=[
            {"title": "[FIRING:1] WebhookJobsFailed stripe (page)", "text": "a job failed"}])
        assert (sent.status_code, sent.body) == (200, "ok")
        empty = client.send(blocks=[])
        assert (empty.status_code, empty.body) == (400, "no_text")
        broken = requests.post(f"{fake.url}/slack/page", data=b"{not json", timeout=5)
        assert (broken.status_code, broken.text) == (400, "invalid_payload")
        [post] = fake.posts("/slack/page")
        assert post.body["text"] == "hello"
        assert slack_alertnames(post.body) == ["WebhookJobsFailed"]


def test_webhook_receivers_record_alertmanagers_payload() -> None:
    payload = {"version": "4", "receiver": "deadmansswitch", "status": "firing",
               "alerts": [{"status": "firing", "labels": {"alertname": "Watchdog"}}]}
    with FakeAlertReceivers() as fake:
        answer = requests.post(f"{fake.url}/webhook/deadmansswitch", json=payload, timeout=5)
        assert answer.status_code == 200
        assert requests.post(f"{fake.url}/elsewhere", json={}, timeout=5).status_code == 404
        [post] = fake.all_posts()
        assert post.path == "/webhook/deadmansswitch"
        assert webhook_alertnames(post.body) == ["Watchdog"]
