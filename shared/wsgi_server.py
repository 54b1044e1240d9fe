"""The WSGI server every HTTP process runs under: granian (`web` and `console`).

granian was chosen by measurement (`python -m benchmarks --only servers`; figures in
benchmarks/results/README.md): its HTTP layer is Rust, so a request costs less CPU than
under gunicorn's gthread workers, on the same Flask app.
"""

from __future__ import annotations

from typing import Any

from granian.constants import HTTPModes, Interfaces
from granian.http import HTTP1Settings
from granian.server import Server

# granian's own listen backlog; the kernel caps it at net.core.somaxconn (4096 on Linux
# since 5.4).
DEFAULT_BACKLOG = 1024
# What `web` and `console` give header_seconds: a client sends its request head at once
# (a provider, a browser). Without it a socket that never sends a byte is held forever.
HEADER_SECONDS = 5


def serve(app: str, *, host: str, port: int, workers: int, threads: int,
          interface: Interfaces = Interfaces.WSGI, header_seconds: float | None = None,
          connections: int | None = None, backlog: int = DEFAULT_BACKLOG) -> None:
    """Run the app factory `app` ("module:function", called in each server process) until
    SIGTERM or SIGINT. WSGI: `threads` app threads per process, requests beyond them wait
    in the server, unread. RSGI: the app runs on the process's event loop and keeps its own
    `threads` (ingest.front).

    header_seconds: serve HTTP/1.1 only, and close a connection that has not sent a whole
    request head within this long of its accept, or of its previous answer (hyper's
    `header_read_timeout`). Only HTTP/1.1 alone applies it from the accept: granian's
    default h1/h2 detection first waits, with no deadline, for the bytes that tell the
    two apart, so a connection that sends nothing is never closed.
    connections: how many connections one process serves at once (granian's
    `backpressure`; default backlog ÷ workers); more wait in the listen backlog."""
    http: dict[str, Any] = {}
    if header_seconds is not None:
        http = {"http": HTTPModes.http1,
                "http1_settings": HTTP1Settings(header_read_timeout=int(header_seconds * 1000))}
    Server(
        app,
        factory=True,
        interface=interface,
        address=host,
        port=port,
        workers=workers,
        blocking_threads=threads if interface == Interfaces.WSGI else 1,
        websockets=False,
        backlog=backlog,
        backpressure=connections,
        **http,
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
