"""Run the ingest under gunicorn (the Procfile's `web`), from Python so settings are
validated, and the embedded defaults resolved, before any worker starts."""

from __future__ import annotations

import os
from typing import Any

from gunicorn.app.base import BaseApplication

from shared.settings import Settings


class IngestServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: Settings, options: dict[str, Any]) -> None:
        self.settings = settings
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        from ingest.app import create_app
        from shared.logs import configure_logging

        configure_logging(self.settings)
        return create_app(self.settings)


def _child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def _close_when_oversized(limit: int) -> Any:
    """A body over the limit is refused (413) from its Content-Length, unread. gunicorn
    drains at most 64 kB of an unread body before reusing the connection and otherwise
    drops it, after a 413 that said `Connection: keep-alive`: a client that reuses it
    loses its next request. Mark such a request's connection to close, and say so."""

    def pre_request(worker: Any, req: Any) -> None:
        for name, value in req.headers:
            if name == "CONTENT-LENGTH" and value.isdigit() and int(value) > limit:
                req.force_close()

    return pre_request


def serve(settings: Settings, workers: int, threads: int, host: str = "0.0.0.0") -> None:  # noqa: S104
    options = {
        "bind": f"{host}:{settings.port}",
        "workers": workers,
        "threads": threads,
        "worker_class": "gthread" if threads > 1 else "sync",
        "keepalive": 5,
        "timeout": 30,
        "graceful_timeout": 10,
        "accesslog": None,
        "child_exit": _child_exit,
        "pre_request": _close_when_oversized(settings.max_body_bytes),
        "preload_app": False,
        "control_socket_disable": True,  # several web processes may share a host
    }
    IngestServer(settings, options).run()
