"""`/calls`: the calls handlers queued to other APIs, newest first, filter `status`. An
ambiguous call (its outcome unknown when its key's lifetime passed) is shown here for a
person to check at the target and settle with `webhooks calls settle KEY --sent|--resend`
(docs/calls.md): the console does not settle, as only the target can say what happened."""

from __future__ import annotations

from flask import Blueprint, abort, render_template, request

from webhooks.console.state import current
from webhooks.shared.calls import list_calls
from webhooks.shared.models import CallStatus

PAGE_SIZE = 100


def register(blueprint: Blueprint) -> None:
    blueprint.add_url_rule("/calls", "calls", listing)


def listing() -> str:
    raw = request.args.get("status", "").strip()
    if raw and raw not in set(CallStatus):
        abort(400, f"status must be one of {', '.join(CallStatus)}, not {raw!r}")
    rows = list_calls(current().engine, raw or None, PAGE_SIZE)
    return render_template("console/calls.html", calls=rows, status=raw or None,
                           CallStatus=CallStatus)
