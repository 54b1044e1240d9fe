"""`/events`: the listing with `webhooks events`' filters as query parameters, newest
first, a keyset page at a time; `/events/<provider>/<event_id>`: what `webhooks show`
shows; Replay (one failed job) and Replay all (every failed job the filters match, after a
page that says how many) through shared.replay, the operation `webhooks replay` runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from flask import Blueprint, abort, redirect, render_template, request, url_for
from sqlalchemy.engine import Connection
from werkzeug.datastructures import MultiDict
from werkzeug.wrappers import Response

from webhooks.console.state import current, reading
from webhooks.shared.events import (
    MAX_PAGE,
    Cursor,
    EventFilter,
    count_events,
    list_events,
    show_event,
)
from webhooks.shared.models import JobStatus, jobs
from webhooks.shared.replay import ReplayFilter, ReplayRefused, replay
from webhooks.shared.terminal import visible_json

PAGE_SIZE = 50
COUNT_AT_MOST = 10_000  # the listing says "10000+" beyond this
FILTERS = ("provider", "source", "type", "status", "since", "until", "search")


def register(blueprint: Blueprint) -> None:
    blueprint.add_url_rule("/events", "events", listing)
    blueprint.add_url_rule("/events/replay", "replay_all", confirm_replay_all)
    blueprint.add_url_rule("/events/replay", "replay_all_post", replay_all, methods=["POST"])
    blueprint.add_url_rule("/events/<provider>/<eventid:event_id>", "event", event,
                           merge_slashes=False)
    blueprint.add_url_rule("/jobs/<int:job_id>/replay", "replay_job", replay_job,
                           methods=["POST"])


def listing() -> str:
    spec = parse_filter(request.args)
    after = _cursor(request.args.get("after"))
    with reading() as conn:
        page = list_events(conn, spec, limit=PAGE_SIZE, after=after)
        total = count_events(conn, spec, at_most=COUNT_AT_MOST)
    return render_template("console/events.html", page=page, total=total, spec=spec,
                           more_than=COUNT_AT_MOST if total > COUNT_AT_MOST else None,
                           args=filter_args(request.args), after=after)


def event(provider: str, event_id: str) -> str:
    with reading() as conn:
        detail = show_event(conn, provider, event_id)
    if detail is None:
        abort(404, f"No {provider} event {event_id!r} is recorded (or it was pruned).")
    if "payload_error" in detail.event:  # as Postgres holds it (shared.payloads)
        payload = (f"(cannot be loaded: {detail.event['payload_error']})\n"
                   + visible_json(detail.event["payload"]))
    else:
        payload = visible_json(json.dumps(detail.event["payload"], indent=2,
                                          ensure_ascii=False, sort_keys=True))
    return render_template("console/event.html", detail=detail, payload=payload)


def confirm_replay_all() -> str:
    """Says how many failed jobs Replay all would move, with the button. A GET, so it only
    counts the listing: it locks nothing (a cross-site image could request it)."""
    spec = parse_filter(request.args, status=JobStatus.FAILED)
    with reading() as conn:
        count = len(failed_job_ids(conn, spec))
    return render_template("console/replay_all.html", count=count, spec=spec,
                           args=filter_args(request.args, status=None))


def replay_all() -> Response:
    spec = parse_filter(request.form, status=JobStatus.FAILED)
    moved = _plan(spec)
    current().wake_jobs(moved)
    args: dict[str, Any] = filter_args(request.form, status="failed")
    return redirect(url_for(".events", **args, notice="replayed", n=len(moved)), 303)


def replay_job(job_id: int) -> Response:
    console = current()
    key = _event_of(job_id)
    try:
        plan = replay(console.engine, ReplayFilter(job_ids=(job_id,)), dry_run=False)
    except ReplayRefused as refused:
        abort(409, f"{refused} Nothing was changed.")
    console.wake_jobs(plan.job_ids)
    notice = "replayed" if plan.job_ids else "already_pending"
    return redirect(url_for(".event", provider=key[0], event_id=key[1], notice=notice,
                            n=len(plan.job_ids)), 303)


def _event_of(job_id: int) -> tuple[str, str]:
    with reading() as conn:
        row = conn.execute(sa.select(jobs.c.provider, jobs.c.event_id)
                           .where(jobs.c.id == job_id)).first()
    if row is None:
        abort(404, f"No job {job_id}.")
    return row.provider, row.event_id


def _plan(spec: EventFilter) -> list[int]:
    """The failed jobs the listing shows for spec, replayed by id, so Replay all moves
    exactly what the page lists; only failed jobs ever move."""
    with reading() as conn:
        job_ids = failed_job_ids(conn, spec)
    if not job_ids:  # an empty id list would mean "every failed job" to replay()
        return []
    try:
        plan = replay(current().engine, ReplayFilter(job_ids=tuple(job_ids)), dry_run=False)
    except ReplayRefused as refused:  # one finished between the listing and the replay
        abort(409, f"{refused} Nothing was changed; reload and try again.")
    return plan.job_ids


def failed_job_ids(conn: Connection, spec: EventFilter) -> list[int]:
    ids: list[int] = []
    after = None
    while True:
        page = list_events(conn, spec, limit=MAX_PAGE, after=after)
        ids.extend(row.job_id for row in page.events if row.job_id is not None)
        if page.next is None:
            return ids
        after = page.next


def parse_filter(args: MultiDict[str, str], **fixed: Any) -> EventFilter:
    """The filters from query parameters (or a form); 400 on a bad value."""
    status = fixed.get("status", _text(args, "status"))
    if status is not None and status not in set(JobStatus):
        abort(400, f"status must be one of {', '.join(JobStatus)}, not {status!r}")
    provider, source = _text(args, "provider"), _text(args, "source")
    if source is not None:  # `stripe/connect`, or `stripe`: the provider's default source
        provider, _, name = source.partition("/")
        source = name or provider
    return EventFilter(provider=provider, event_type=_text(args, "type"),
                       status=JobStatus(status) if status else None,
                       since=parse_time(args, "since"), until=parse_time(args, "until"),
                       search=_text(args, "search"), source=source)


def filter_args(args: MultiDict[str, str], **override: Any) -> dict[str, str]:
    """The non-empty filters, to carry into links and forms."""
    kept = {name: args[name].strip() for name in FILTERS if args.get(name, "").strip()}
    kept.update(override)
    return {name: value for name, value in kept.items() if value is not None}


def parse_time(args: MultiDict[str, str], name: str) -> datetime | None:
    """ISO 8601, date or date and time; UTC unless it says otherwise."""
    raw = _text(args, name)
    if raw is None:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        abort(400, f"{name} must be a date or time such as 2026-11-01 or "
                   f"2026-11-01T14:30Z, not {raw!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _text(args: MultiDict[str, str], name: str) -> str | None:
    return args.get(name, "").strip() or None


def _cursor(token: str | None) -> Cursor | None:
    if not token:
        return None
    try:
        return Cursor.parse(token)
    except (ValueError, OverflowError):
        abort(400, "after: not a page token of this console")
