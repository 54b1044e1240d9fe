"""Run the ingest under granian (shared/wsgi_server.py; the Procfile's `web`), from Python
so settings are validated before any server process starts. Its interface is RSGI: the
front (ingest/front.py) reads each body on the event loop, then runs the Flask app."""

from __future__ import annotations

import os
from typing import Any

from granian.constants import Interfaces

from shared import wsgi_server
from shared.settings import Settings

APP = "ingest.server:app"
# How serve() tells the server processes (forked, with this environment) their threads.
THREADS_VARIABLE = "WEB_THREADS"


def app() -> Any:
    """The app as each server process builds it (granian imports this, factory=True): the
    Flask app behind the front that reads bodies off the app's threads (ingest.front)."""
    from ingest.app import create_app
    from ingest.front import Front
    from shared.logs import configure_logging

    settings = Settings.from_env()
    configure_logging(settings)
    return Front(create_app(settings), settings.web_threads)


def serve(settings: Settings, workers: int, threads: int, host: str) -> None:
    from shared.logs import configure_logging

    configure_logging(settings)
    os.environ[THREADS_VARIABLE] = str(threads)  # the app's pool: a connection per thread
    wsgi_server.serve(APP, host=host, port=settings.port, workers=workers, threads=threads,
                      interface=Interfaces.RSGI)
