"""`/notifications`: the recorded notifications newest first (shared/notifications.py),
filters `kind` and `status`, each with its channels' delivery states. Read-only: a
notification is sent by the dispatcher, never from here."""

from __future__ import annotations

from enum import StrEnum

from flask import Blueprint, abort, render_template, request

from webhooks.console.state import reading
from webhooks.shared.models import NotificationKind, NotificationStatus
from webhooks.shared.notifications import list_notifications

PAGE_SIZE = 100


def register(blueprint: Blueprint) -> None:
    blueprint.add_url_rule("/notifications", "notifications", listing)


def listing() -> str:
    kind = _one_of("kind", NotificationKind)
    status = _one_of("status", NotificationStatus)
    with reading() as conn:
        rows = list_notifications(conn, limit=PAGE_SIZE, kind=kind, status=status)
    return render_template("console/notifications.html", notifications=rows, kind=kind,
                           status=status, kinds=list(NotificationKind),
                           statuses=list(NotificationStatus))


def _one_of(name: str, vocabulary: type[StrEnum]) -> str | None:
    raw = request.args.get(name, "").strip()
    if not raw:
        return None
    if raw not in set(vocabulary):
        abort(400, f"{name} must be one of {', '.join(vocabulary)}, not {raw!r}")
    return raw
