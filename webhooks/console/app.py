"""The console as its own process: `create_app` builds the Flask app, `serve` runs it under
granian on CONSOLE_PORT (the Procfile's `console`, through `webhooks console`).

granian, as the ingest: already a dependency, a production server (the ingest's own), and
one server process of a few threads is plenty for a handful of operators. Its interface is
RSGI, as the ingest's: the front (webhooks/console/front.py) authenticates a request from
its headers, then reads its body on the event loop within a deadline and MAX_FORM_BYTES,
then runs the Flask app on THREADS threads. Its server process is forked from `serve`'s
and builds the app from the settings `serve` was given.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, Response
from granian.constants import Interfaces
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.wrappers import Request

from webhooks.console.auth import Guard
from webhooks.console.blueprint import GUARD, create_blueprint, secure
from webhooks.console.front import REFUSAL, Front, Refusal
from webhooks.console.settings import ConsoleSettings
from webhooks.shared import db, sources, wakeups, wsgi_server
from webhooks.shared.settings import Settings

THREADS = 4  # app threads, and the pool's connections
MAX_FORM_BYTES = 64 * 1024  # the console's forms are a token and a few filters
_APP = "webhooks.console.app:_server_app"
# The settings and threads `serve` was given, for the forked server process's _server_app.
_serving: tuple[Settings, ConsoleSettings, int] | None = None


def create_app(settings: Settings, console_settings: ConsoleSettings, *,
               threads: int = THREADS) -> Flask:
    """The console alone, at the root of its own app. MissingVariable without
    CONSOLE_PASSWORD or DATABASE_URL. The broker (BROKER_URL, optional here) wakes the
    workers after a replay or a retry; without it the clock's sweeper does. The overview
    lists every source the settings configure."""
    console_settings.require_password()
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_FORM_BYTES
    engine = db.create_engine(settings, pool_size=threads)
    broker = wakeups.create_broker(settings) if settings.broker_url else None
    app.register_blueprint(create_blueprint(engine, console_settings, broker=broker,
                                            hook_modules=settings.handler_modules,
                                            configured=sources.registry(settings)))
    # Answers outside the blueprint's routes (a 404 or 405 for a path it does not serve)
    # carry its headers too; and no redirect that merges slashes, whose Location werkzeug
    # builds from the Host header.
    app.after_request(secure)
    app.url_map.merge_slashes = False
    # The client address the login limit keys on: the socket's peer, or behind
    # TRUSTED_PROXIES the X-Forwarded-For entry the proxies appended, as for the ingest.
    if settings.trusted_proxies:
        app.wsgi_app = _behind_proxies(app.wsgi_app, settings.trusted_proxies)  # type: ignore[method-assign]
    app.extensions[REFUSAL] = _refusal(app.extensions[GUARD], settings.trusted_proxies)
    return app


def _behind_proxies(app: Any, trusted: int) -> Any:
    """REMOTE_ADDR becomes the X-Forwarded-For entry the Nth proxy from us appended,
    counted from the right; what lies left of it came from the client and may be forged.
    With fewer entries than N, the socket's peer stays. Nothing else (scheme, host) is
    taken from the proxies' headers: nothing here needs it."""
    return ProxyFix(app, x_for=trusted, x_proto=0, x_host=0, x_port=0, x_prefix=0)


def _refusal(guard: Guard, trusted: int) -> Refusal:
    """The Guard's answer to a request's headers, its client found as the app finds it."""
    def ask(environ: dict[str, Any], _: Any) -> Response | None:
        return guard.refusal(Request(environ))

    asked = _behind_proxies(ask, trusted) if trusted else ask

    def refusal(environ: dict[str, Any]) -> Response | None:
        answer: Response | None = asked(environ, None)
        return answer

    return refusal


def serve(settings: Settings, console_settings: ConsoleSettings, host: str,
          threads: int = THREADS) -> None:
    """Run the console on CONSOLE_PORT until SIGTERM/SIGINT. Raises ConfigError
    (MissingVariable for an unset DATABASE_URL, BROKER_URL or CONSOLE_PASSWORD: exit 1)
    before listening when ConsoleSettings.check fails."""
    global _serving
    console_settings.check(settings)
    from webhooks.shared.logs import configure_logging

    configure_logging(settings)
    _serving = (settings, console_settings, threads)
    # HTTP/1.1 only, a silent connection closed after HEADER_SECONDS, as for `web`.
    wsgi_server.serve(_APP, host=host, port=console_settings.port, workers=1, threads=threads,
                      interface=Interfaces.RSGI, header_seconds=wsgi_server.HEADER_SECONDS)


def _server_app() -> Front:
    """The app as granian's server process builds it (the Flask app behind its front): from
    serve's settings (the process is forked), or from the environment if it was spawned."""
    settings, console_settings, threads = _serving or (
        Settings.from_env(), ConsoleSettings.from_env(), THREADS)
    if _serving is None:
        from webhooks.shared.logs import configure_logging

        configure_logging(settings)
    return Front(create_app(settings, console_settings, threads=threads), threads)
