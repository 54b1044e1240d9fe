"""Serving a WSGI (Flask) app through granian's RSGI interface, as the web's and the
console's fronts do (webhooks/ingest/front.py, webhooks/console/front.py): the request's
environ from its headers, bounded before any work per header, and the app run to the end
of its response in a pool thread. Each front reads the body itself, on its event loop.
"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Any

# A request's headers, checked before any work per header: as many as hyper's HTTP/1.1
# parser takes at all, and their names and values together at most this many bytes (a
# provider sends under 2 KiB; nginx's default buffers take 32 KiB).
MAX_HEADERS = 100
MAX_HEADER_BYTES = 65_536


class HeadersTooLarge(Exception):
    """More than MAX_HEADERS headers, or more than MAX_HEADER_BYTES of them: 431, before
    the request is anyone's (no provider, no source: not counted as a delivery)."""

    status = 431


def environ(scope: Any) -> dict[str, Any]:
    """PEP 3333's environ for the request, without wsgi.input (the body comes later).
    HeadersTooLarge before any work per header; names holding `_` dropped (they would
    alias the `-` name we read); repeated headers joined with "," once, at the end."""
    items: list[tuple[str, str]] = scope.headers.items()
    if len(items) > MAX_HEADERS:
        raise HeadersTooLarge(f"more than {MAX_HEADERS} headers")
    if sum(len(name) + len(value) for name, value in items) > MAX_HEADER_BYTES:
        raise HeadersTooLarge(f"headers over {MAX_HEADER_BYTES} bytes")
    server_name, _, server_port = scope.server.rpartition(":")
    client, _, client_port = scope.client.rpartition(":")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope.method,
        "SCRIPT_NAME": "",
        # WSGI's strings are bytes as latin-1; RSGI's path is decoded text.
        "PATH_INFO": scope.path.encode("utf-8").decode("latin-1"),
        "QUERY_STRING": scope.query_string,
        "SERVER_NAME": server_name.strip("[]"),
        "SERVER_PORT": server_port,
        "SERVER_PROTOCOL": f"HTTP/{scope.http_version}",
        "REMOTE_ADDR": client.strip("[]"),
        "REMOTE_PORT": client_port,
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.scheme,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    repeated: dict[str, list[str]] = {}
    for name, value in items:
        if "_" in name:
            continue
        key = name.upper().replace("-", "_")
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            environ[key] = value
        else:
            repeated.setdefault(f"HTTP_{key}", []).append(value)
    for key, values in repeated.items():
        environ[key] = values[0] if len(values) == 1 else ",".join(values)
    return environ


def call(app: Callable[..., Any],
         environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
    """The WSGI app, run to the end of its response, in a pool thread."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Any:
        started[:] = [status, headers]
        return None

    result: Iterable[bytes] = app(environ, start_response)  # type: ignore[arg-type]
    try:
        content = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    status, headers = started
    return int(status.split(" ", 1)[0]), list(headers), content


async def respond(protocol: Any, pool: Executor, app: Callable[..., Any],
                  environ: dict[str, Any], body: bytes | None) -> None:
    """Hand the request, its whole `body` in memory (None: it has none), to the app on a
    `pool` thread, and send its answer."""
    if body is not None:
        environ["CONTENT_LENGTH"] = str(len(body))
        environ.pop("HTTP_TRANSFER_ENCODING", None)
    environ["wsgi.input"] = io.BytesIO(body or b"")
    loop = asyncio.get_running_loop()
    status, headers, content = await loop.run_in_executor(pool, call, app, environ)
    protocol.response_bytes(status, headers, content)
