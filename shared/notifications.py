"""Notifications: operational events recorded for the people on call, in the transaction of
the change they report, and sent once per configured channel by worker/notify.py.

A change and its notification commit together or not at all: the worker's job
transactions (worker/jobs.py) collect what they report in a `Notes` and call `flush` just
before COMMIT; the other recorders (the outbox's marks, the clock's reconciliation runs,
timelines and audits, a handler through `JobContext.notify`) call `record` in their own
transaction. A rolled-back transaction leaves no notification.

Coalescing. The coalesced kinds (COALESCED) have one window per kind and source
(notification_windows). Recording one locks its window row (an upsert that returns the
row, so concurrent recorders of one key queue there):

- window closed, or new: a window opens (closes_at = now + NOTIFY_WINDOW_SECONDS) and the
  notification is due at once: the first of a burst is heard at once;
- window open: its count goes to the window's tail, a notification due when the window
  closes, unless the dispatcher has claimed (sealed) it; then, or with no tail yet, a new
  tail is inserted. A burst is the first message plus one per window.

The other kinds are rare by construction (once per failing period, once per run, once per
timeline) and are due at once. Lock order: a transaction records its keys sorted, and
last (just before COMMIT), after its jobs' and business rows: health rows first, then
window rows, so recorders never wait on each other in a cycle.

A source is failing (provider.failing) once NOTIFY_FAILING_THRESHOLD failed attempts of its
jobs fall in one window (notification_health counts them in tumbling windows), once per
failing period; its next done job records provider.recovered and ends the period. A
successful transaction pays one statement for this, on the partial index of failing
sources (empty while nothing fails).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from sqlalchemy.engine import Connection

from webhooks.shared import db, queries
from webhooks.shared.models import Channel, NotificationKind
from webhooks.shared.settings import Settings

Kind = NotificationKind
SAMPLES = 5  # ids kept per notification: enough to start looking
ERROR_CHARS = 500
COALESCED = frozenset({Kind.JOB_FAILED, Kind.EMAIL_FAILED, Kind.STRIPE_EVENT_GENERATION_FAILED,
                       Kind.AUDIT_VIOLATION, Kind.CALL_FAILED, Kind.CALL_AMBIGUOUS})
NONE = ""  # notification_windows' provider and source for kinds without one
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_id() -> str:
    """`ntf_` and 26 characters, ULID-like: 48 bits of milliseconds, 80 random bits, so ids
    sort by creation. The generic webhook's `webhook-id`."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = [_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5)]
    return "ntf_" + "".join(chars)


def channels(settings: Settings) -> list[Channel]:
    """The channels configured: each notification gets one delivery per channel."""
    return [channel for channel, on in ((Channel.SLACK, settings.notify_slack_webhook_url),
                                        (Channel.EMAIL, settings.notify_email_to),
                                        (Channel.WEBHOOK, settings.notify_webhook_url)) if on]


@dataclass
class Occurrence:
    """One or more occurrences of a kind for a source, to be recorded."""

    kind: Kind
    provider: str | None = None
    source: str | None = None
    count: int = 1
    samples: list[str] = field(default_factory=list)
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return (str(self.kind), self.provider or NONE, self.source or NONE)

    def merge(self, other: Occurrence) -> None:
        self.count += other.count
        self.samples = (self.samples + other.samples)[:SAMPLES]
        self.error = self.error or other.error


@dataclass(frozen=True)
class Queued:
    """What a transaction recorded: notifications due at once, and the seconds until the
    latest coalesced tail it added to falls due (None: none)."""

    due_now: int = 0
    tail_in: float | None = None

    def __add__(self, other: Queued) -> Queued:
        tails = [t for t in (self.tail_in, other.tail_in) if t is not None]
        return Queued(self.due_now + other.due_now, max(tails) if tails else None)


def record(conn: Connection, settings: Settings,
           occurrences: Iterable[Occurrence]) -> Queued:
    """Record the occurrences in conn's transaction, coalesced per kind and source (see
    the module's docstring), keys in sorted order. Call it last in the transaction."""
    merged: dict[tuple[str, str, str], Occurrence] = {}
    for item in occurrences:
        if item.key in merged:
            merged[item.key].merge(item)
        else:
            merged[item.key] = Occurrence(item.kind, item.provider, item.source, item.count,
                                          item.samples[:SAMPLES], item.error, dict(item.extra))
    result = Queued()
    wanted = channels(settings)
    for key in sorted(merged):
        item = merged[key]
        if item.kind in COALESCED:
            result += _coalesce(conn, settings, item, wanted)
        else:
            _insert(conn, settings, item, wanted)
            result += Queued(due_now=1)
    return result


def _coalesce(conn: Connection, settings: Settings, item: Occurrence,
              wanted: Sequence[Channel]) -> Queued:
    kind, provider, source = item.key
    key = {"kind": kind, "provider": provider, "source": source}
    # Straight through the driver (db.fetch_in, db.execute_in): a failed job pays these.
    window = db.fetch_in(conn, queries.NotificationWindowLock, key)
    assert window is not None  # an upsert returns its row
    is_open, closes_at, tail_id, closes_in = window
    if not is_open:
        _insert(conn, settings, item, wanted)
        db.execute_in(conn, queries.NotificationWindowOpen,
                      {**key, "window": settings.notify_window_seconds})
        return Queued(due_now=1)
    tail_in = max(float(closes_in), 0.0)
    if tail_id is not None and db.execute_in(conn, queries.NotificationAddToTail, {
            "id": tail_id, "count": item.count, "samples": json.dumps(item.samples)}) == 1:
        return Queued(tail_in=tail_in)
    tail_id = _insert(conn, settings, item, wanted, due_at=closes_at)
    db.execute_in(conn, queries.NotificationWindowTail, {**key, "tail_id": tail_id})
    return Queued(tail_in=tail_in)


def _insert(conn: Connection, settings: Settings, item: Occurrence,
            wanted: Sequence[Channel], due_at: datetime | None = None) -> str:
    notification_id = new_id()
    details = {"samples": item.samples, **item.extra}
    if item.error:
        details["first_error"] = item.error[:ERROR_CHARS]
    link = console_link(settings, item.kind, item.provider, item.source)
    if link:
        details["console_url"] = link
    db.execute_in(conn, queries.NotificationInsert, {
        "id": notification_id, "kind": str(item.kind), "provider": item.provider,
        "source": item.source, "count": item.count, "due_at": due_at,
        "details": json.dumps(details), "channels": [str(channel) for channel in wanted]})
    return notification_id


# --- what a job transaction reports ---------------------------------------------------


@dataclass
class Notes:
    """What one job transaction reports, written by `flush` just before its COMMIT: jobs
    failed for good, failed attempts per source, sources with a done job."""

    failed: list[Occurrence] = field(default_factory=list)
    attempts: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    done: set[tuple[str, str]] = field(default_factory=set)
    other: list[Occurrence] = field(default_factory=list)

    def failed_attempt(self, provider: str, source: str, *, job_id: int, event_id: str,
                       error: str, final: bool) -> None:
        self.attempts[(provider, source)] += 1
        if final:
            self.failed.append(Occurrence(Kind.JOB_FAILED, provider, source,
                                          samples=[f"job {job_id} ({event_id})"], error=error))

    def job_done(self, provider: str, source: str) -> None:
        self.done.add((provider, source))

    def add(self, occurrence: Occurrence) -> None:
        self.other.append(occurrence)

    def __bool__(self) -> bool:
        return bool(self.failed or self.attempts or self.done or self.other)


def flush(conn: Connection, settings: Settings, notes: Notes) -> Queued:
    """Write what `notes` collected in conn's transaction (call it just before COMMIT),
    and empty it."""
    if not notes:
        return Queued()
    occurrences = [*_recoveries(conn, notes.done - set(notes.attempts)),
                   *_failing(conn, settings, notes.attempts), *notes.failed, *notes.other]
    recorded = record(conn, settings, occurrences) if occurrences else Queued()
    notes.failed, notes.other = [], []
    notes.attempts, notes.done = defaultdict(int), set()
    return recorded


def _recoveries(conn: Connection, done: set[tuple[str, str]]) -> list[Occurrence]:
    """provider.recovered for each failing source with a done job: one statement, straight
    through the driver (every successful batch runs it)."""
    if not done:
        return []
    keys = sorted(done)
    rows = db.fetch_all_in(conn, queries.NotificationHealthRecover, {
        "providers": [provider for provider, _ in keys],
        "sources": [source for _, source in keys]}, queries.RecoveredSource)
    return [Occurrence(Kind.PROVIDER_RECOVERED, row.provider, row.source) for row in rows]


def _failing(conn: Connection, settings: Settings,
             attempts: dict[tuple[str, str], int]) -> list[Occurrence]:
    """Count the failed attempts per source; provider.failing for each that reached the
    threshold within its window and was not failing yet."""
    found = []
    for provider, source in sorted(attempts):
        count = attempts[(provider, source)]
        row = db.fetch_in(conn, queries.NotificationHealthFail, {
            "provider": provider, "source": source, "attempts": count,
            "window": settings.notify_window_seconds})
        assert row is not None  # an upsert returns its row
        failed_attempts, failing = row
        if failing or failed_attempts < settings.notify_failing_threshold:
            continue
        if db.execute_in(conn, queries.NotificationHealthMarkFailing,
                         {"provider": provider, "source": source}) == 1:
            found.append(Occurrence(Kind.PROVIDER_FAILING, provider, source,
                                    count=int(failed_attempts), extra={
                                        "window_seconds": settings.notify_window_seconds}))
    return found


# --- what a message says ----------------------------------------------------------------


def label(provider: str | None, source: str | None) -> str:
    """`stripe`, `stripe/connect`, or `-` for kinds without a source."""
    if not provider:
        return "-"
    return provider if not source or source == provider else f"{provider}/{source}"


def console_link(settings: Settings, kind: str, provider: str | None,
                 source: str | None) -> str | None:
    """The console page a person should look at, when CONSOLE_URL is set."""
    if not settings.console_url:
        return None
    base = settings.console_url
    if kind == Kind.EMAIL_FAILED:
        return f"{base}/emails?status=failed"
    if provider and kind in (Kind.JOB_FAILED, Kind.PROVIDER_FAILING, Kind.RECONCILE_FOUND,
                             Kind.STRIPE_EVENT_GENERATION_FAILED):
        query = {"source": label(provider, source)}
        if kind in (Kind.JOB_FAILED, Kind.PROVIDER_FAILING):
            query["status"] = "failed"
        return f"{base}/events?{urlencode(query)}"
    return f"{base}/notifications"


def what_to_look_at(kind: str, provider: str | None, source: str | None,
                    details: dict[str, Any]) -> str:
    """The console link, else the command that shows the same."""
    if details.get("console_url"):
        return str(details["console_url"])
    if kind == Kind.EMAIL_FAILED:
        return "webhooks show PROVIDER EVENT_ID (the console's /emails lists them)"
    if kind in (Kind.DATABASE_FAILOVER,):
        return "webhooks notifications"
    if kind == Kind.AUDIT_VIOLATION:
        return "webhooks audit"
    if kind in (Kind.CALL_FAILED, Kind.CALL_AMBIGUOUS):
        status = "failed" if kind == Kind.CALL_FAILED else "ambiguous"
        return f"webhooks calls --status {status}"
    if provider:
        status = " --status failed" if kind in (Kind.JOB_FAILED, Kind.PROVIDER_FAILING) else ""
        return f"webhooks events --source {label(provider, source)}{status}"
    return "webhooks notifications"


@dataclass(frozen=True)
class Message:
    """A notification as its channels send it (worker/notify.py reads it sealed)."""

    id: str
    kind: str
    provider: str | None
    source: str | None
    count: int
    created_at: datetime
    details: dict[str, Any]

    @property
    def subject(self) -> str:
        times = f" (x{self.count})" if self.count > 1 else ""
        return f"[webhooks] {self.kind}: {label(self.provider, self.source)}{times}"

    @property
    def text(self) -> str:
        lines = [f"{self.kind} on {label(self.provider, self.source)}: {self.count} "
                 f"{'occurrence' if self.count == 1 else 'occurrences'}"]
        if self.details.get("first_error"):
            lines.append(f"First error: {self.details['first_error']}")
        if self.details.get("samples"):
            lines.append(f"Examples: {', '.join(map(str, self.details['samples']))}")
        lines.append("Look at: " + what_to_look_at(self.kind, self.provider, self.source,
                                                   self.details))
        lines.append(f"Notification {self.id}")
        return "\n".join(lines)

    @property
    def slack_text(self) -> str:
        """The text as Slack's incoming webhook takes it (mrkdwn): `&`, `<` and `>` written
        `&amp;`, `&lt;` and `&gt;`, as Slack asks of any that is not markup, which it then
        shows as the characters. What came from data (an event id in the samples, a
        handler's error, a kind or a source) can then never be read as `<!channel>`, a
        mention or a `<url|label>` link; we send no markup of our own. The email and the
        webhook carry `text` and the details as they are (plain text, JSON).
        (tests/integration/test_notify.py test_slack_text_from_data_is_escaped_as_slack_asks)"""
        return slack_escape(self.text)

    def webhook_body(self) -> dict[str, Any]:
        return {"type": self.kind, "timestamp": _iso(self.created_at),
                "data": {"id": self.id, "provider": self.provider, "source": self.source,
                         "count": self.count, **self.details}}


_SLACK_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def slack_escape(text: str) -> str:
    """Text for Slack's mrkdwn, its three control characters escaped (Slack's "Escaping
    text"); nothing else is changed."""
    return text.translate(_SLACK_ESCAPES)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


# --- what `webhooks notifications` and the console list ---------------------------------

NO_CHANNEL = "no channel"  # a notification recorded with no channel configured


@dataclass(frozen=True)
class Listed:
    id: str
    kind: str
    provider: str | None
    source: str | None
    count: int
    status: str
    created_at: datetime
    due_at: datetime
    sent_at: datetime | None
    channels: dict[str, str]  # channel -> its delivery's status
    details: dict[str, Any]

    @property
    def label(self) -> str:
        return label(self.provider, self.source)

    @property
    def shown_status(self) -> str:
        """The status, or "no channel" for one that nothing was configured to send."""
        return self.status if self.channels else NO_CHANNEL


def list_notifications(conn: Connection, *, limit: int = 50, kind: str | None = None,
                       status: str | None = None) -> list[Listed]:
    """The newest notifications first, with each channel's delivery status."""
    found = conn.execute(queries.NotificationList,
                         {"limit": limit, "kind": kind, "status": status}).mappings()
    return [Listed(row["id"], row["kind"], row["provider"], row["source"], int(row["count"]),
                   row["status"], row["created_at"], row["due_at"], row["sent_at"],
                   dict(row["channels"]), dict(row["details"])) for row in found]
