"""The console as a Flask blueprint: mount it in any Flask app, under any url_prefix.

    from webhooks.console import ConsoleSettings, create_blueprint
    app.register_blueprint(
        create_blueprint(engine, ConsoleSettings(password=os.environ["CONSOLE_PASSWORD"])),
        url_prefix="/ops")

Every request to it needs HTTP Basic auth; every POST a CSRF token (auth.py); with
`readonly`, no button is rendered and every POST is refused (403). Pages: overview.py,
events.py, emails.py, notifications.py. Nothing here holds state between requests but the
engine and the broker it was given.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import dramatiq
import sqlalchemy as sa
from flask import Blueprint, Response, abort, g, render_template, request
from flask.blueprints import BlueprintSetupState
from sqlalchemy.engine import Engine
from werkzeug.exceptions import HTTPException
from werkzeug.routing import BaseConverter

from webhooks.console import calls, emails, events, notifications, overview, pauses
from webhooks.console.auth import TOKEN_FIELD, Guard
from webhooks.console.settings import ConsoleSettings
from webhooks.console.state import Console
from webhooks.shared import hooks, sources
from webhooks.shared.errors import DatabaseUnavailable
from webhooks.shared.events import MAX_ROW_ID
from webhooks.shared.models import EmailStatus, JobStatus

log = logging.getLogger(__name__)

# No script, style or font from another host (or from anywhere: the one style sheet is
# the blueprint's own); no framing; forms post only back here.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",  # payloads and customer emails: kept out of shared caches
}


GUARD = "webhooks_console_guard"  # the app.extensions key of the (first) console's Guard


class EventIdConverter(BaseConverter):
    """An event id in one path segment, whatever it holds (slashes, '?', '#', '%'):
    encoded whole, so a browser never reads a '/' or '..' of it as path structure."""

    regex = ".+"
    part_isolating = False

    def to_url(self, value: str) -> str:
        return quote(value, safe="")


def create_blueprint(engine: Engine, settings: ConsoleSettings, *,
                     broker: dramatiq.Broker | None = None,
                     name: str = "console", hook_modules: Iterable[str] = (),
                     configured: Iterable[sources.Source] = ()) -> Blueprint:
    """The console for `engine`. MissingVariable if settings has no password. The event
    page shows the effects the hooks registered (shared.hooks) by the apps of
    `hook_modules` (your WEBHOOK_HANDLERS) and of the `webhooks.handlers` entry points. The
    overview lists the `configured` sources (`shared.sources.registry(settings)`) even
    before their first event, with their Pause buttons; and every source with rows."""
    console = Console(engine, settings, Guard(settings), broker,
                      tuple((source.provider, source.name) for source in configured))
    hooks.load(hook_modules)
    blueprint = Blueprint(name, __name__, template_folder="templates",
                          static_folder="static", static_url_path="/console-static")
    blueprint.record_once(_add_converter)
    # The app's Guard, for a server that asks it before reading a body (webhooks.console.front).
    blueprint.record_once(lambda state: state.app.extensions.setdefault(GUARD, console.guard))
    blueprint.before_request(lambda: _guard(console))
    blueprint.after_request(secure)
    blueprint.context_processor(lambda: _template_globals(console))
    blueprint.register_error_handler(DatabaseUnavailable, _database_unavailable)
    blueprint.register_error_handler(sa.exc.OperationalError, _database_unavailable)
    blueprint.register_error_handler(HTTPException, _http_error)
    for template_filter in (when, age, duration):
        blueprint.add_app_template_filter(template_filter, f"console_{template_filter.__name__}")
    blueprint.add_app_template_filter(sources.label, "console_source")
    overview.register(blueprint)
    pauses.register(blueprint)
    events.register(blueprint)
    emails.register(blueprint)
    calls.register(blueprint)
    notifications.register(blueprint)
    return blueprint


def _add_converter(state: BlueprintSetupState) -> None:
    state.app.url_map.converters.setdefault("eventid", EventIdConverter)


def _holds_nul() -> bool:
    """Postgres's text holds no NUL: a filter or id with one can match nothing."""
    values = [request.path, *(v for _, vs in request.args.lists() for v in vs)]
    if request.method == "POST":
        values += [v for _, vs in request.form.lists() for v in vs]
    return any("\x00" in value for value in values)


def _guard(console: Console) -> Response | None:
    g.webhooks_console = console
    # The credentials first, from the headers alone: nothing of a stranger's body is read
    # (security review 2026-12c, section 6; test_a_post_is_authenticated_before_its_body_is_read).
    refused = console.guard.refusal(request)
    if refused is not None:
        return refused
    if _holds_nul():
        abort(400, "A NUL character is in the address or the form: nothing to look up.")
    if any(isinstance(value, int) and value > MAX_ROW_ID
           for value in (request.view_args or {}).values()):
        abort(404, "No such row: the id is beyond any row's.")
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        if console.settings.readonly:
            abort(403, "This console is read-only (CONSOLE_READONLY=1): nothing can be changed.")
        if not console.guard.valid_token(request.form.get(TOKEN_FIELD)):
            abort(403, "Missing or invalid CSRF token: nothing was changed. Reload the page "
                       "and try again.")
    return None


def secure(response: Response) -> Response:
    """The security headers on a response (kept where it set one already)."""
    for header, value in SECURITY_HEADERS.items():
        response.headers.setdefault(header, value)
    return response


def _template_globals(console: Console) -> dict[str, Any]:
    return {"readonly": console.settings.readonly, "csrf_field": TOKEN_FIELD,
            "JobStatus": JobStatus, "EmailStatus": EmailStatus,  # no status spelled twice
            "csrf_token": console.guard.token, "console_user": console.settings.user,
            # After a change, the redirect names what happened (a fixed set of messages).
            "notice": request.args.get("notice"),
            "notice_count": request.args.get("n", default=0, type=int)}


def _http_error(error: HTTPException) -> tuple[str, int]:
    return render_template("console/error.html", code=error.code, title=error.name,
                           message=error.description), error.code or 500


def _database_unavailable(error: Exception) -> tuple[str, int]:
    log.warning("console: database unavailable: %s", str(error).splitlines()[0])
    return render_template("console/error.html", code=503, title="Database unavailable",
                           message="Postgres did not answer. Try again in a moment."), 503


def when(moment: datetime | None) -> str:
    """A time in UTC, to the second."""
    if moment is None:
        return "—"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def age(moment: datetime | None) -> str:
    """How long ago, roughly."""
    if moment is None:
        return ""
    return duration((datetime.now(UTC) - moment).total_seconds()) + " ago"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(int(seconds), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            rest = seconds % size
            smaller = {"d": ("h", 3600), "h": ("m", 60), "m": ("s", 1)}[unit]
            tail = f" {rest // smaller[1]}{smaller[0]}" if rest // smaller[1] else ""
            return f"{seconds // size}{unit}{tail}"
    return f"{seconds}s"
