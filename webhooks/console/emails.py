"""`/emails`: outbox emails newest first, filter `status`; Retry puts a failed email back
to pending with its idempotency key (the dispatcher searches Postmark before sending it
again, so a retry never sends twice)."""

from __future__ import annotations

import sqlalchemy as sa
from flask import Blueprint, abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from webhooks.console.state import current, reading
from webhooks.shared.events import MAX_ROW_ID, list_emails
from webhooks.shared.models import EmailStatus, outbox
from webhooks.shared.replay import retry_email

PAGE_SIZE = 50


def register(blueprint: Blueprint) -> None:
    blueprint.add_url_rule("/emails", "emails", listing)
    blueprint.add_url_rule("/emails/<int:email_id>/retry", "retry_email", retry,
                           methods=["POST"])


def listing() -> str:
    status = _status(request.args.get("status", "").strip())
    before = request.args.get("before", type=int)
    if before is not None and not 0 < before <= MAX_ROW_ID:
        abort(400, "before: not an email id")
    with reading() as conn:
        rows = list_emails(conn, status, limit=PAGE_SIZE + 1, before_id=before)
    older = rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None
    return render_template("console/emails.html", emails=rows[:PAGE_SIZE], status=status,
                           older=older, before=before)


def retry(email_id: int) -> Response:
    console = current()
    with reading() as conn:
        row = conn.execute(sa.select(outbox.c.provider, outbox.c.event_id)
                           .where(outbox.c.id == email_id)).first()
    if row is None:
        abort(404, f"No email {email_id}.")
    retried = retry_email(console.engine, email_id)
    if retried:
        console.wake_outbox()
    notice = "retried" if retried else "not_failed"
    if request.form.get("from") == "event" and row.provider and row.event_id:
        return redirect(url_for(".event", provider=row.provider, event_id=row.event_id,
                                notice=notice), 303)
    return redirect(url_for(".emails", status=request.form.get("status") or None,
                            notice=notice), 303)


def _status(raw: str) -> EmailStatus | None:
    if not raw:
        return None
    if raw not in set(EmailStatus):
        abort(400, f"status must be one of {', '.join(EmailStatus)}, not {raw!r}")
    return EmailStatus(raw)
