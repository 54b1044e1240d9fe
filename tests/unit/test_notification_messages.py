"""What a notification says on each channel, its id, and the channels' settings: no
database."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime

import pytest

from webhooks.shared import notifications
from webhooks.shared.errors import ConfigError
from webhooks.shared.notifications import Kind, Message
from webhooks.shared.settings import Settings


def message(**changes: object) -> Message:
    base = Message("ntf_01TEST", "job.failed", "stripe", "connect", 12,
                   datetime(2026, 12, 2, 7, 0, tzinfo=UTC),
                   {"first_error": "InvalidEvent: data.object.customer is missing",
                    "samples": ["job 1 (evt_1)", "job 2 (evt_2)"]})
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_the_text_names_kind_source_count_first_error_and_what_to_look_at() -> None:
    text = message().text
    assert text.startswith("job.failed on stripe/connect: 12 occurrences")
    assert "First error: InvalidEvent: data.object.customer is missing" in text
    assert "job 1 (evt_1), job 2 (evt_2)" in text
    assert "webhooks events --source stripe/connect --status failed" in text
    assert message().subject == "[webhooks] job.failed: stripe/connect (x12)"


def test_with_a_console_url_the_link_is_the_page_to_look_at() -> None:
    settings = Settings(console_url="https://ops.example.com")
    link = notifications.console_link(settings, Kind.JOB_FAILED, "stripe", "connect")
    assert link == "https://ops.example.com/events?source=stripe%2Fconnect&status=failed"
    assert notifications.console_link(settings, Kind.EMAIL_FAILED, "stripe", None) == (
        "https://ops.example.com/emails?status=failed")
    assert notifications.console_link(Settings(), Kind.JOB_FAILED, "stripe", None) is None
    assert "https://ops.example.com" in message(details={"console_url": link}).text


def test_the_webhook_body_is_type_timestamp_and_data() -> None:
    body = message().webhook_body()
    assert body["type"] == "job.failed" and body["timestamp"] == "2026-12-02T07:00:00Z"
    assert {k: body["data"][k] for k in ("id", "provider", "source", "count")} == {
        "id": "ntf_01TEST", "provider": "stripe", "source": "connect", "count": 12}


def test_ids_are_ntf_and_26_characters_sorting_by_creation() -> None:
    first = notifications.new_id()
    time.sleep(0.002)
    second = notifications.new_id()
    assert first.startswith("ntf_") and len(first) == 30 and first < second


def test_channels_are_those_configured() -> None:
    assert notifications.channels(Settings()) == []
    both = Settings(notify_slack_webhook_url="https://hooks.slack.com/x",
                    notify_email_to="a@example.com")
    assert [str(c) for c in notifications.channels(both)] == ["slack", "email"]


@pytest.mark.parametrize("secret", ["whsec_", "whsec_***", "abc", "whsec_ not base64"])
def test_a_bad_webhook_secret_names_the_variable(secret: str) -> None:
    with pytest.raises(ConfigError, match=r"^NOTIFY_WEBHOOK_SECRET: "):
        Settings.from_env({"NOTIFY_WEBHOOK_SECRET": secret})
