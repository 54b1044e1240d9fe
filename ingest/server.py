"""Run the ingest under granian (shared/wsgi_server.py; the Procfile's `web`), from Python
so settings are validated before any server process starts. Its interface is RSGI: the
front (ingest/front.py) reads each body on the event loop, then runs the Flask app."""

from __future__ import annotations

import logging
import os
import resource
from typing import Any

from granian.constants import Interfaces

from webhooks.shared import wsgi_server
from webhooks.shared.settings import Settings

APP = "webhooks.ingest.server:app"
# How serve() tells the server processes (forked, with this environment) their threads.
THREADS_VARIABLE = "WEB_THREADS"
# A connection is closed when it has not sent a whole request head within this long of
# its accept or of its previous answer (shared/wsgi_server.py HEADER_SECONDS).
HEADER_SECONDS = wsgi_server.HEADER_SECONDS
# Connections one process serves at once. The front holds no thread per connection, and an
# idle one costs granian a few KB (benchmarks/results/README.md, 2026-12-05), so this is
# set far above what one host can open (its ephemeral ports: about 28,000 per
# destination); what bounds memory is the body budget (ingest.front), not this. Each takes
# a file descriptor: see connection_limit().
CONNECTIONS = 16_384
# Descriptors kept for the process's own use (database pool, Redis, metrics files, logs).
RESERVED_DESCRIPTORS = 1_024
# The listen backlog where connections wait when a process is at its limit (the kernel
# caps it at net.core.somaxconn).
BACKLOG = 4_096

log = logging.getLogger(__name__)


def app() -> Any:
    """The app as each server process builds it (granian imports this, factory=True): the
    Flask app behind the front that reads bodies off the app's threads (ingest.front)."""
    from webhooks.ingest.app import create_app
    from webhooks.ingest.front import Front
    from webhooks.shared.logs import configure_logging

    settings = Settings.from_env()
    configure_logging(settings)
    return Front(create_app(settings), settings.web_threads)


def serve(settings: Settings, workers: int, threads: int, host: str) -> None:
    from webhooks.shared.logs import configure_logging

    configure_logging(settings)
    os.environ[THREADS_VARIABLE] = str(threads)  # the app's pool: a connection per thread
    wsgi_server.serve(APP, host=host, port=settings.port, workers=workers, threads=threads,
                      interface=Interfaces.RSGI, header_seconds=HEADER_SECONDS,
                      connections=connection_limit(), backlog=BACKLOG)


def connection_limit() -> int:
    """CONNECTIONS, or fewer when the open-files limit cannot hold them. The soft limit
    (`ulimit -n`) is raised first, up to the hard one, for this process and the server
    processes it forks. At the limit granian stops accepting: new connections wait in the
    listen backlog until one closes (a silent one within HEADER_SECONDS), and the process
    keeps the descriptors it needs for its database and broker connections."""
    wanted = CONNECTIONS + RESERVED_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return CONNECTIONS
    limit = max(64, soft - min(RESERVED_DESCRIPTORS, soft // 4))
    log.warning("web serves at most %d connections per process: the open-files limit "
                "(ulimit -n) is %d, its hard limit %s; raise it to %d for %d", limit, soft,
                hard, wanted, CONNECTIONS)
    return limit
