"""Run the ingest under granian (the Procfile's `web`), from Python so settings are
validated before any server process starts.

granian was chosen by measurement (`python -m benchmarks --only servers`; figures in
benchmarks/results/README.md): its HTTP layer is Rust, so a delivery costs the web less
CPU than under gunicorn's gthread workers, on the same Flask app.
"""

from __future__ import annotations

import os
from typing import Any

from granian.constants import Interfaces
from granian.server import Server

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
    Server(
        APP,
        factory=True,
        interface=Interfaces.WSGI,
        address=host,
        port=settings.port,
        workers=workers,
        # The app's threads per process: requests beyond them wait in the server, unread.
        blocking_threads=threads,
        websockets=False,
        # A server process that dies (killed, out of memory) is replaced, as gunicorn's
        # arbiter did; without this granian stops the whole server.
        respawn_failed_workers=True,
        respawn_interval=1.0,
        # SIGTERM: stop accepting, finish requests in flight, then exit; a process still
        # busy after this long is killed (each request is one short transaction).
        workers_kill_timeout=10,
        # The server's own lines (listening, process started or replaced) go through the
        # root logger, in LOG_FORMAT like every other line.
        log_dictconfig={"loggers": {"_granian": {"propagate": True}}},
    ).serve()
