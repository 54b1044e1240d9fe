"""The web's front door: granian's RSGI interface, so that reading a request's body never
holds an app thread.

Under WSGI the app reads the body itself, in one of the process's few app threads, and a
client that sends its headers and part of a body, then nothing, holds that thread for as
long as it likes: a handful of such connections stop every delivery. Here the body is read
on the server process's event loop, which waits on any number of stalled clients at no
cost, within BODY_SECONDS and MAX_BODY_BYTES; only a request whose body has arrived is
handed, as a WSGI environ with the body in memory, to the Flask app on a pool of `threads`
threads (one database connection each). A client that stops sending gets 408 and loses
its connection.

What must be decided before any body is read (the allowlist's 403, the 404 of a provider
not configured, the 413 of a Content-Length over the limit) is decided here from the
headers alone, by the same function the route applies (ingest.webhooks.refusal).
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flask import Flask

from ingest import webhooks
from shared.errors import BodyTimeout, InvalidPayload, PayloadTooLarge, RejectedDelivery

# A body must arrive within this long of the request's headers. A provider's delivery is
# a few kilobytes sent at once; MAX_BODY_BYTES at a slow client's pace fits well within it.
BODY_SECONDS = 10.0


class Front:
    """An RSGI application serving a Flask (WSGI) app."""

    def __init__(self, app: Flask, threads: int) -> None:
        self._app = app
        self._limit: int = app.extensions["settings"].max_body_bytes
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="web")

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        if scope.proto != "http":
            return
        environ = _environ(scope)
        refused = webhooks.refusal(self._app, environ)
        if refused is not None:
            _answer(protocol, *refused)
            return
        too_large = PayloadTooLarge(f"body over {self._limit} bytes")
        declared = environ.get("CONTENT_LENGTH")
        if declared and (not declared.isdigit() or int(declared) > self._limit):
            # Any path: no body over the limit is read into memory, announced or not.
            self._refuse(protocol, environ, too_large)
            return
        try:
            body = await asyncio.wait_for(
                _body(protocol, self._limit, environ.get("CONTENT_LENGTH")), BODY_SECONDS)
        except TimeoutError:
            self._refuse(protocol, environ,
                         BodyTimeout(f"body not received within {BODY_SECONDS:g} s"))
            return
        except _TooLarge:
            self._refuse(protocol, environ, too_large)
            return
        except Exception:  # the connection broke (RSGIProtocolClosed): the body is lost
            body = None
        if body is None or (declared and len(body) < int(declared)):
            self._refuse(protocol, environ, InvalidPayload(
                "body shorter than its Content-Length (client went away)"))
            return
        environ["CONTENT_LENGTH"] = str(len(body))
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        environ["wsgi.input"] = io.BytesIO(body)
        loop = asyncio.get_running_loop()
        status, headers, content = await loop.run_in_executor(self._pool, _call, self._app,
                                                              environ)
        protocol.response_bytes(status, headers, content)

    def _refuse(self, protocol: Any, environ: dict[str, Any], error: RejectedDelivery) -> None:
        """Answer a request refused while its body was read, and close the connection."""
        webhooks.count_rejected(self._app, environ, error)
        _answer(protocol, error.status, {"error": str(error)})


class _TooLarge(Exception):
    pass


async def _body(protocol: Any, limit: int, declared: str | None) -> bytes:
    """The whole body, at most `limit` bytes. With a Content-Length (already held to the
    limit) in one read; a chunked body chunk by chunk, counted."""
    if declared is not None:
        body: bytes = await protocol()
        return body
    chunks: list[bytes] = []
    size = 0
    async for chunk in protocol:
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _environ(scope: Any) -> dict[str, Any]:
    """PEP 3333's environ for the request, without wsgi.input (the body comes later)."""
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
    for name, value in scope.headers.items():
        key = name.upper().replace("-", "_")
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            environ[key] = value
            continue
        key = f"HTTP_{key}"
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def _call(app: Flask, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
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


def _answer(protocol: Any, status: int, body: dict[str, str]) -> None:
    """A refusal: its body is left unread, so the connection is not used again."""
    headers = [("content-type", "application/json"), ("connection", "close")]
    protocol.response_bytes(status, headers, json.dumps(body).encode())

