"""Run the ingest under granian (shared/wsgi_server.py; the Procfile's `web`), from Python
so settings are validated before any server process starts."""

from __future__ import annotations

import os
from typing import Any

from shared import wsgi_server
from shared.settings import Settings

APP = "ingest.server:app"
# How serve() tells the server processes (forked, with this environment) their threads.
THREADS_VARIABLE = "WEB_THREADS"


def app() -> Any:
    """The WSGI app as each server process builds it (granian imports this, factory=True)."""
    from ingest.app import DEFAULT_THREADS, create_app
    from shared.logs import configure_logging

    settings = Settings.from_env()
    configure_logging(settings)
    return create_app(settings, threads=int(os.environ.get(THREADS_VARIABLE, DEFAULT_THREADS)))


def serve(settings: Settings, workers: int, threads: int, host: str) -> None:
    from shared.logs import configure_logging

    configure_logging(settings)
    os.environ[THREADS_VARIABLE] = str(threads)  # the app's pool: a connection per thread
    wsgi_server.serve(APP, host=host, port=settings.port, workers=workers, threads=threads)
