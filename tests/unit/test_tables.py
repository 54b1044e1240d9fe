"""The events table and the JSON of `webhooks events` / `webhooks show`, without a database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from webhooks import tables
from webhooks.shared.events import EventRow

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def row(last_error: str | None = None, status: str | None = "failed",
        ago: timedelta = timedelta(minutes=5)) -> EventRow:
    return EventRow(id=1, provider="stripe", event_id="evt_1NqXyz", event_type="invoice.paid",
                    received_at=NOW - ago, job_id=7 if status else None, status=status,
                    attempts=3, last_error=last_error)


def test_age_is_the_largest_whole_unit() -> None:
    assert [tables.age(timedelta(seconds=s)) for s in (0, 59, 60, 7199, 86400 * 3 + 5)] == [
        "0s", "59s", "1m", "1h", "3d"]
    assert tables.age(timedelta(seconds=-3)) == "0s"  # a clock a little ahead


def test_only_the_last_error_is_cut_to_the_width() -> None:
    error = "RuntimeError: " + "long " * 100
    text = tables.events_table([row(error)], NOW, 80)
    line = text.splitlines()[1]
    assert len(line) == 80 and line.endswith("…") and "evt_1NqXyz" in line
    narrow = tables.events_table([row(error)], NOW, 30).splitlines()[1]
    assert "evt_1NqXyz" in narrow  # the columns are never cut, the error keeps a few chars
    assert narrow.endswith("…") and "RuntimeError" in narrow


def test_a_multiline_error_stays_on_its_line_and_a_missing_job_shows_a_dash() -> None:
    lines = tables.events_table([row("Traceback:\n  boom\nKeyError"),
                                 row(status=None)], NOW, 200).splitlines()
    assert len(lines) == 3 and lines[1].endswith("Traceback: boom KeyError")
    assert lines[2].startswith("-")


def test_json_lines_have_iso_datetimes() -> None:
    parsed = json.loads(tables.event_line(row()))
    assert parsed["received_at"] == "2026-12-01T11:55:00+00:00"
    assert parsed["status"] == "failed" and parsed["attempts"] == 3
