"""What `webhooks events` and `webhooks show` print: the events table cut to the terminal's
width, an event's detail as text, and both as JSON (datetimes in ISO 8601)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from dataclasses import asdict, fields
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from webhooks.shared import sources
from webhooks.shared.events import EventDetail, EventRow
from webhooks.shared.hooks import Section, Violation
from webhooks.shared.notifications import Listed
from webhooks.shared.terminal import visible

EVENT_COLUMNS = ("status", "attempts", "age", "source", "account", "type", "event id",
                 "last error")
ACCOUNT = "account"
NO_JOB = "-"  # an event whose job is gone


def to_json(value: Any) -> str:
    """One line of JSON, every non-ASCII character escaped as JSON does (\\u009b, \\u202e):
    nothing in it drives a terminal."""
    return _dumps(value)


def _dumps(value: Any, indent: int | None = None) -> str:
    # A payload the ingest accepted may nest about a thousand levels deep; the encoder
    # recurses once or twice per level.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        return json.dumps(value, default=_plain, indent=indent)
    finally:
        sys.setrecursionlimit(limit)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def event_line(row: EventRow, payload: str | None = None) -> str:
    """One event as one JSON object (`events --json`); with `payload` (the jsonb text
    Postgres printed, shared.events.payloads_of), that payload under "payload", as
    recorded: spliced in rather than loaded and dumped again, its non-ASCII characters
    escaped as to_json escapes them (`events --json --payload`, which
    `webhooks check-handlers` reads back)."""
    line = to_json(asdict(row))
    if payload is None:
        return line
    return f'{line[:-1]}, "payload": {_ascii(payload)}}}'


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _ascii(text: str) -> str:
    """JSON text with each non-ASCII character as json.dumps writes it (\\u009b, a
    surrogate pair beyond the BMP): the same value. Outside its strings, JSON text is
    ASCII."""
    return _NON_ASCII.sub(lambda char: json.dumps(char.group())[1:-1], text)


MIN_ERROR = 20  # characters of the last error shown however narrow the terminal


def events_table(rows: Iterable[EventRow], now: datetime, width: int) -> str:
    """Columns padded to their widest cell, never cut; the last error takes what is left
    of `width` (at least MIN_ERROR characters), on one line, cut with an ellipsis. The
    account column only when a row has an account (Stripe Connect)."""
    rows = list(rows)
    columns = [c for c in EVENT_COLUMNS if c != ACCOUNT or any(r.account for r in rows)]
    table = [columns, *([cell for column, cell in zip(EVENT_COLUMNS, _cells(row, now),
                                                       strict=True) if column in columns]
                        for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns) - 1)]
    lines = []
    for line in table:
        head = "  ".join(cell.rjust(w) if i == 1 else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(line, widths, strict=False)))
        room = max(width - len(head) - 2, MIN_ERROR)
        lines.append(f"{head}  {cut(line[-1], room)}".rstrip())
    return "\n".join(lines)


def _cells(row: EventRow, now: datetime) -> list[str]:
    return [status(row), str(row.attempts), age(now - row.received_at),
            visible(sources.label(row.provider, row.source)), visible(row.account or ""),
            visible(row.event_type), visible(row.event_id), visible(one_line(row.last_error))]


def status(row: EventRow) -> str:
    """The job's status; a pending job of a paused provider or source says so."""
    if row.status is None:
        return NO_JOB
    return f"{row.status} (paused)" if row.paused and row.status == "pending" else row.status


def age(elapsed: timedelta) -> str:
    """45s, 12m, 5h, 3d: the largest whole unit."""
    seconds = max(0, int(elapsed.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def one_line(text: str | None) -> str:
    return " ".join(text.split()) if text else ""


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def detail_json(detail: EventDetail) -> str:
    """Its fields (not asdict(): that copies the payload recursively, level by level), each
    effect section under its own key, before the emails."""
    shown: dict[str, Any] = {}
    for field in fields(detail):
        if field.name == "effects":
            shown.update((section.key, section.value()) for section in detail.effects)
        else:
            shown[field.name] = getattr(detail, field.name)
    return to_json(shown)


def detail_text(detail: EventDetail) -> str:
    """An event for a terminal: what it is, its job, its effects, then its payload."""
    event, job = detail.event, detail.job
    lines = [f"event         {event['provider']} {event['event_id']} ({event['event_type']})",
             f"source        {_source_line(event)}",
             f"received      {_time(event['received_at'])}; duplicates: {detail.duplicates}"]
    lines += _job_lines(job)
    for section in detail.effects:
        lines += _section_lines(section)
    lines.append(_label("emails") + ("none" if not detail.emails else ""))
    for email in detail.emails:
        postmark = f"Postmark {email['message_id']}" if email["message_id"] else "not sent"
        error = f"; last error: {one_line(email['last_error'])}" if email["last_error"] else ""
        lines.append(f"  {email['kind']} to {email['to_address']}: {email['status']}, "
                     f"{email['attempts']} attempt(s), {postmark}  "
                     f"({email['idempotency_key']}){error}")
    if "payload_error" in event:  # as Postgres holds it (shared.payloads)
        lines += [f"payload (cannot be loaded: {event['payload_error']})", event["payload"]]
    else:
        lines += ["payload", *_dumps(event["payload"], indent=2).split("\n")]
    # Every line's data with its control characters escaped: no line of it drives the
    # terminal or starts a line of its own.
    return "\n".join(visible(line) for line in lines)


def _source_line(event: dict[str, Any]) -> str:
    """The source; for Stripe also the account (the platform's own when none) and mode."""
    line = sources.label(event["provider"], event["source"])
    if event.get("livemode") is not None:
        line += (f"; account {event['account'] or 'the platform'}; "
                 f"{'live' if event['livemode'] else 'test'} mode")
    return line


def _job_lines(job: dict[str, Any] | None) -> list[str]:
    if job is None:
        return ["job           none (pruned)"]
    lines = [f"job           #{job['id']} {job['status']}, {job['attempts']} attempt(s)"
             + (f"; outcome: {job['outcome']}" if job["outcome"] else ""),
             f"  created {_time(job['created_at'])}; run at {_time(job['run_at'])}; "
             f"finished {_time(job['finished_at'])}"]
    if job["last_error"]:
        lines.append(f"  last error: {job['last_error']}")
    return lines


LABEL_WIDTH = 14  # "subscription  ": the labels' column


def _label(name: str) -> str:
    return f"{name:<{LABEL_WIDTH - 2}}  "


def _section_lines(section: Section) -> list[str]:
    """A single-row section on its label's line ("none" without it); rows of the others
    one a line under it."""
    rows = [section.text.format(**{name: _time(value) if isinstance(value, datetime) else value
                                   for name, value in row.items()})
            for row in section.rows]
    if section.single:
        return [_label(section.label) + (rows[0] if rows else "none")]
    return [_label(section.label) + ("" if rows else "none"), *(f"  {row}" for row in rows)]


def _time(value: datetime | None) -> str:
    return value.isoformat(sep=" ", timespec="seconds") if value else "-"


def violation_text(violation: Violation) -> str:
    """One violation on one line (`audit`): its check, then what is wrong and where."""
    return visible(f"{violation.check}: {violation.finding.message}")


def violation_json(violation: Violation) -> str:
    """One violation as one JSON object (`audit --json`): its check, the provider (the
    app's that registered the check, or the rows'), the message and the rows concerned,
    by table."""
    return to_json({"check": violation.check, "provider": violation.provider or None,
                    "message": violation.finding.message, "rows": violation.finding.rows})


NOTIFICATION_COLUMNS = ("created", "kind", "source", "count", "status", "channels", "id")


def notification_line(row: Listed) -> str:
    """One notification as one JSON object (`notifications --json`)."""
    return to_json({**asdict(row), "label": row.label, "shown_status": row.shown_status})


def notifications_table(rows: Iterable[Listed]) -> str:
    """Newest first: when, kind, provider/source, count, status, each channel's status."""
    table = [list(NOTIFICATION_COLUMNS)] + [[
        row.created_at.isoformat(timespec="seconds"), visible(row.kind), visible(row.label),
        str(row.count), row.shown_status,
        " ".join(f"{channel}:{state}" for channel, state in sorted(row.channels.items())) or "-",
        visible(row.id)] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(NOTIFICATION_COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                     .rstrip() for line in table)
