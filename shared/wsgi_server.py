"""The WSGI server every HTTP process runs under: granian (`web` and `console`).

granian was chosen by measurement (`python -m benchmarks --only servers`; figures in
benchmarks/results/README.md): its HTTP layer is Rust, so a request costs less CPU than
under gunicorn's gthread workers, on the same Flask app.
"""

from __future__ import annotations

from granian.constants import Interfaces
from granian.server import Server


def serve(app: str, *, host: str, port: int, workers: int, threads: int,
          interface: Interfaces = Interfaces.WSGI) -> None:
    """Run the app factory `app` ("module:function", called in each server process) until
    SIGTERM or SIGINT. WSGI: `threads` app threads per process, requests beyond them wait
    in the server, unread. RSGI: the app runs on the process's event loop and keeps its own
    `threads` (ingest.front)."""
    Server(
        app,
        factory=True,
        interface=interface,
        address=host,
        port=port,
        workers=workers,
        blocking_threads=threads if interface == Interfaces.WSGI else 1,
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
