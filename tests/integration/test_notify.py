"""The notification dispatcher against a real Postgres and fake receivers over real HTTP:
a fake Slack, a fake Standard Webhooks receiver (verifying with `standardwebhooks`) and
the fake Postmark."""

from __future__ import annotations

import base64
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY
from sqlalchemy.engine import Engine

from tests.fakes.notify_receivers import NotifyReceivers
from tests.fakes.postmark_server import FakePostmark
from webhooks.shared import db, notifications, queries
from webhooks.shared.errors import ConfigError
from webhooks.shared.notifications import Kind, Occurrence
from webhooks.shared.settings import Settings
from webhooks.worker import notify, outbox

SECRET = "whsec_" + base64.b64encode(b"notification-test-secret-32bytes").decode()


@pytest.fixture()
def fakes() -> Iterator[NotifyReceivers]:
    with NotifyReceivers(SECRET) as receivers:
        yield receivers


@pytest.fixture()
def postmark() -> Iterator[FakePostmark]:
    with FakePostmark() as server:
        yield server


@pytest.fixture()
def channels(settings: Settings, clean_db: Engine, fakes: NotifyReceivers,
             postmark: FakePostmark) -> Settings:
    return dataclasses.replace(
        settings, notify_slack_webhook_url=fakes.slack_url, notify_webhook_url=fakes.webhook_url,
        notify_webhook_secret=SECRET, notify_email_to="oncall@example.com",
        postmark_server_token=postmark.token, postmark_api_url=postmark.url,
        job_max_attempts=3, console_url="https://console.example.com")


def record(engine: Engine, settings: Settings, *items: Occurrence) -> None:
    with db.transaction(engine) as conn:
        notifications.record(conn, settings, items)


def job_failed(count: int = 1) -> Occurrence:
    return Occurrence(Kind.JOB_FAILED, "stripe", "stripe", count=count,
                      samples=["job 7 (evt_1)"], error="InvalidEvent: data.object.customer")


def rows(engine: Engine, sql: str) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(sql)))


def failed_total(channel: str) -> float:
    return REGISTRY.get_sample_value("webhooks_notifications_failed_total",
                                     {"channel": channel}) or 0.0


def drain(engine: Engine, settings: Settings) -> None:
    for _ in range(10):
        with db.transaction(engine) as conn:
            conn.execute(sa.text("UPDATE notification_deliveries SET run_at = now() "
                                 "WHERE status = 'pending' AND attempts > 0"))
        if not notify.dispatch_due(engine, settings).claimed:
            return


def test_each_channel_gets_the_notification_once(clean_db, channels, fakes, postmark) -> None:
    record(clean_db, channels, job_failed())
    result = notify.dispatch_due(clean_db, channels)
    assert (result.claimed, result.sent) == (3, 3)
    [slack] = fakes.received("slack")
    text = slack.json["text"]
    assert "job.failed" in text and "stripe" in text and "InvalidEvent" in text
    # Slack's escaping (test_slack_text_from_data_is_escaped_as_slack_asks), which Slack undoes
    assert "https://console.example.com/events?source=stripe&amp;status=failed" in text
    [hook] = fakes.received("webhook")
    [note] = rows(clean_db, "SELECT * FROM notifications")
    assert hook.webhook_id == note.id
    body = hook.json
    assert body["type"] == "job.failed" and body["data"]["id"] == note.id
    assert (body["data"]["provider"], body["data"]["source"], body["data"]["count"]) == (
        "stripe", "stripe", 1)
    assert postmark.by_key() == {f"notification:{note.id}": 1}
    [message] = postmark.snapshot()["messages"]
    assert "job.failed" in message["Subject"] and "stripe" in message["Subject"]
    assert note.status == "sent" and note.sealed
    assert {d.status for d in rows(clean_db, "SELECT * FROM notification_deliveries")} == {"sent"}
    assert not notify.dispatch_due(clean_db, channels).claimed  # nothing sent twice


def test_without_a_console_url_the_message_names_a_command(clean_db, channels, fakes) -> None:
    settings = dataclasses.replace(channels, console_url=None)
    record(clean_db, settings, Occurrence(Kind.JOB_FAILED, "stripe", "connect"))
    notify.dispatch_due(clean_db, settings)
    [slack] = fakes.received("slack")
    assert "webhooks events --source stripe/connect --status failed" in slack.json["text"]


def test_a_receiver_failing_first_gets_the_same_webhook_id_again(clean_db, channels,
                                                                  fakes) -> None:
    fakes.set_mode("webhook", fail_first=1)
    record(clean_db, channels, job_failed())
    first = notify.dispatch_due(clean_db, channels)
    assert first.retried == 1
    drain(clean_db, channels)
    attempts = fakes.requests("webhook")
    assert [r.answered for r in attempts] == [500, 204]
    assert len({r.webhook_id for r in attempts}) == 1
    assert rows(clean_db, "SELECT status FROM notifications")[0].status == "sent"


def test_a_channel_that_keeps_failing_fails_the_notification_and_is_counted(
        clean_db, channels, fakes) -> None:
    fakes.set_mode("slack", status=503)
    before = failed_total("slack")
    record(clean_db, channels, job_failed())
    drain(clean_db, channels)
    assert len(fakes.requests("slack")) == channels.job_max_attempts
    by_channel = {d.channel: d for d in rows(clean_db, "SELECT * FROM notification_deliveries")}
    assert by_channel["slack"].status == "failed" and "503" in by_channel["slack"].last_error
    assert by_channel["webhook"].status == "sent" and by_channel["email"].status == "sent"
    assert rows(clean_db, "SELECT status FROM notifications")[0].status == "failed"
    assert failed_total("slack") == before + 1


def test_a_permanent_refusal_fails_at_once(clean_db, channels, fakes) -> None:
    fakes.set_mode("webhook", status=410)
    record(clean_db, channels, job_failed())
    notify.dispatch_due(clean_db, channels)
    assert len(fakes.requests("webhook")) == 1
    [hook] = rows(clean_db, "SELECT * FROM notification_deliveries WHERE channel = 'webhook'")
    assert hook.status == "failed"


def test_a_slow_receiver_never_blocks_a_receipt(clean_db, channels, fakes, postmark) -> None:
    fakes.set_mode("slack", hold=True)
    record(clean_db, channels, job_failed())
    with db.transaction(clean_db) as conn:
        conn.execute(sa.text(
            "INSERT INTO outbox (idempotency_key, kind, to_address, subject, text_body, "
            "html_body) VALUES ('receipt:in_1', 'receipt', 'a@example.com', 's', 't', 'h')"))
    dispatching = threading.Thread(target=notify.dispatch_due, args=(clean_db, channels))
    dispatching.start()
    try:
        fakes.wait_for("slack")
        sent = outbox.dispatch_due(clean_db, channels)  # while Slack holds its request
        assert sent.sent == 1 and "receipt:in_1" in postmark.by_key()
    finally:
        fakes.release()
        dispatching.join()


def test_a_claimed_delivery_is_hidden_for_its_lease(clean_db, channels) -> None:
    record(clean_db, channels, job_failed())
    with db.transaction(clean_db) as conn:
        claimed = conn.execute(queries.NotificationDeliveryClaim,
                               {"limit": 10, "lease": 60}).all()
    assert len(claimed) == 3 and {c.attempts for c in claimed} == {1}
    with db.transaction(clean_db) as conn:
        again = conn.execute(queries.NotificationDeliveryClaim, {"limit": 10, "lease": 60}).all()
    assert again == []


def test_the_claim_seals_the_tail_and_later_occurrences_make_a_new_one(clean_db, channels,
                                                                       fakes) -> None:
    record(clean_db, channels, job_failed())
    record(clean_db, channels, job_failed(count=4))
    with db.transaction(clean_db) as conn:  # the window closes
        conn.execute(sa.text("UPDATE notifications SET due_at = now()"))
        conn.execute(sa.text("UPDATE notification_deliveries SET run_at = now()"))
    notify.dispatch_due(clean_db, channels)
    record(clean_db, channels, job_failed(count=2))  # the window is still open
    counts = sorted(r.json["data"]["count"] for r in fakes.received("webhook"))
    assert counts == [1, 4]
    assert sorted(r.count for r in rows(clean_db, "SELECT * FROM notifications")) == [1, 2, 4]


def test_an_email_retried_after_a_lost_answer_is_searched_not_sent_again(
        clean_db, channels, postmark) -> None:
    settings = dataclasses.replace(channels, notify_slack_webhook_url=None,
                                   notify_webhook_url=None)
    postmark.set_mode(drop_after_accept=1)
    record(clean_db, settings, job_failed())
    drain(clean_db, settings)
    [note] = rows(clean_db, "SELECT * FROM notifications")
    assert postmark.by_key() == {f"notification:{note.id}": 1}
    assert note.status == "sent"


def test_a_webhook_url_without_its_secret_or_a_bad_secret_stops_the_process() -> None:
    with pytest.raises(ConfigError, match="NOTIFY_WEBHOOK_SECRET"):
        Settings.from_env({"NOTIFY_WEBHOOK_URL": "https://hooks.example.com/x"})
    with pytest.raises(ConfigError, match="NOTIFY_WEBHOOK_SECRET"):
        Settings.from_env({"NOTIFY_WEBHOOK_URL": "https://hooks.example.com/x",
                           "NOTIFY_WEBHOOK_SECRET": "not-a-secret"})
    assert Settings.from_env({"NOTIFY_WEBHOOK_URL": "https://hooks.example.com/x",
                              "NOTIFY_WEBHOOK_SECRET": SECRET}).notify_webhook_secret == SECRET


def test_slack_text_from_data_is_escaped_as_slack_asks(clean_db, channels, fakes,  # type: ignore[no-untyped-def]
                                                       postmark) -> None:
    """Slack reads `<!channel>`, `<@U…>` and `<url|label>` in an incoming webhook's text:
    `&`, `<` and `>` that came from data (an event id, an error) are sent as `&amp;`,
    `&lt;` and `&gt;`, which Slack shows as the characters. The email and the webhook
    carry the text as it is (plain text, JSON)."""
    hostile = "evt_y/../<!channel> <https://evil.example/login|Open the console> &amp;"
    error = "ThinFetchFailed: GET /v2/core/events/<!here> <https://evil.example|Open> & co"
    record(clean_db, channels, Occurrence(Kind.JOB_FAILED, "stripe", "stripe",
                                          samples=[f"job 414 ({hostile})"], error=error))
    assert notify.dispatch_due(clean_db, channels).sent == 3
    [slack] = fakes.received("slack")
    text = slack.json["text"]
    assert "<" not in text and ">" not in text
    assert ("job 414 (evt_y/../&lt;!channel&gt; &lt;https://evil.example/login|Open the "
            "console&gt; &amp;amp;)") in text
    assert ("First error: ThinFetchFailed: GET /v2/core/events/&lt;!here&gt; "
            "&lt;https://evil.example|Open&gt; &amp; co") in text
    assert "https://console.example.com/events?source=stripe&amp;status=failed" in text
    [message] = postmark.snapshot()["messages"]
    assert hostile in message["TextBody"] and error in message["TextBody"]
    [hook] = fakes.received("webhook")
    assert hook.json["data"]["first_error"] == error
