"""The WSGI server every HTTP process runs under: granian (`web` and `console`).

granian was chosen by measurement (`python -m benchmarks --only servers`; figures in
benchmarks/results/README.md): its HTTP layer is Rust, so a request costs less CPU than
under gunicorn's gthread workers, on the same Flask app.
"""

from __future__ import annotations

from granian.constants import Interfaces
from granian.server import Server


def serve(app: str, *, host: str, port: int, workers: int, threads: int) -> None:
    """Run the WSGI app factory `app` ("module:function", called in each server process)
    until SIGTERM or SIGINT."""
    Server(
        app,
        factory=True,
        interface=Interfaces.WSGI,
        address=host,
        port=port,
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
