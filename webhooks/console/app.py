"""The console as its own process: `create_app` builds the Flask app, `serve` runs it under
granian on CONSOLE_PORT (the Procfile's `console`, through `webhooks console`).

granian, as the ingest: already a dependency, a production server (the ingest's own), and
one server process of a few threads is plenty for a handful of operators. Its server
process is forked from `serve`'s and builds the app from the settings `serve` was given.
"""

from __future__ import annotations

from typing import Any

from flask import Flask

from shared import db, sources, wakeups, wsgi_server
from shared.settings import Settings
from webhooks.console.blueprint import create_blueprint, secure
from webhooks.console.settings import ConsoleSettings

THREADS = 4  # app threads, and the pool's connections
MAX_FORM_BYTES = 64 * 1024  # the console's forms are a token and a few filters
_APP = "webhooks.console.app:_server_app"
# The settings `serve` was given, for the forked server process's _server_app.
_serving: tuple[Settings, ConsoleSettings] | None = None


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
    return app


def serve(settings: Settings, console_settings: ConsoleSettings, host: str,
          threads: int = THREADS) -> None:
    """Run the console on CONSOLE_PORT until SIGTERM/SIGINT. Raises ConfigError
    (MissingVariable for an unset DATABASE_URL, BROKER_URL or CONSOLE_PASSWORD: exit 1)
    before listening when ConsoleSettings.check fails."""
    global _serving
    console_settings.check(settings)
    from shared.logs import configure_logging

    configure_logging(settings)
    _serving = (settings, console_settings)
    wsgi_server.serve(_APP, host=host, port=console_settings.port, workers=1, threads=threads)


def _server_app() -> Any:
    """The WSGI app as granian's server process builds it: from serve's settings (the
    process is forked), or from the environment if it was spawned."""
    settings, console_settings = _serving or (Settings.from_env(), ConsoleSettings.from_env())
    if _serving is None:
        from shared.logs import configure_logging

        configure_logging(settings)
    return create_app(settings, console_settings)
