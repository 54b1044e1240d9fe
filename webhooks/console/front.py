"""How `webhooks console` serves its app: granian's RSGI interface, so that no request's body
is read in one of the app's few threads, and none is read before its credentials.

Under WSGI the app reads a body itself, in one of the console's 4 app threads, and nothing
bounds that read in time: granian has a deadline for a request's headers
(`header_read_timeout`), none for its body, and a thread blocked in the socket read cannot be
interrupted. Four POSTs that sent their headers and part of a form, then nothing, kept the
operators out (security review 2026-12c, section 6). Here, as ingest/front.py does for the
ingest (which the console may not import; the same shape, the console's limits):

- a request that carries a body is first asked of the console's Guard, from its headers
  alone (the client address as TRUSTED_PROXIES says, through the app's own ProxyFix): a
  stranger gets its 401, a client past its failed logins its 429, and loses the connection,
  its body unread;
- an authenticated body is read on the server process's event loop, which waits on any
  number of stalled clients at no cost, within BODY_SECONDS and the app's
  MAX_CONTENT_LENGTH (the console's forms are a token and a few filters): a body declared or
  sent over it gets 413, one that stops arriving 408, and either loses its connection;
- only then is the request, its body in memory, handed to the Flask app as a WSGI environ,
  on a pool of `threads` threads (one database connection each).

What stays: a stalled request holds a socket and a few kilobytes on the event loop until
its deadline (granian's 30 s for headers, BODY_SECONDS for a body), as for the ingest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flask import Flask, Response

from webhooks.console.blueprint import secure
from webhooks.shared import rsgi

# An authenticated body must arrive within this long of the request's headers: the
# console's forms are a few hundred bytes, sent at once; the ingest allows as long.
BODY_SECONDS = 10.0
# app.extensions: the check a request with a body must pass before it is read, from its
# environ alone (webhooks.console.app.create_app builds it): None, or the answer.
REFUSAL = "webhooks_console_refusal"

Refusal = Callable[[dict[str, Any]], Response | None]


class Front:
    """An RSGI application serving the console's Flask (WSGI) app."""

    def __init__(self, app: Flask, threads: int) -> None:
        self._app = app
        self._limit: int = app.config["MAX_CONTENT_LENGTH"]
        self._refusal: Refusal = app.extensions[REFUSAL]
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="console")

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        if scope.proto != "http":
            return
        try:
            environ = rsgi.environ(scope)
        except rsgi.HeadersTooLarge as error:
            _answer(protocol, Response(f"{error}\n", error.status,
                                       {"Content-Type": "text/plain; charset=utf-8"}))
            return
        declared = environ.get("CONTENT_LENGTH")
        body = None
        if declared not in (None, "", "0") or "HTTP_TRANSFER_ENCODING" in environ:
            refused = self._refusal(dict(environ))  # headers only: a copy, ProxyFix edits it
            if refused is not None:
                _answer(protocol, refused)
                return
            try:
                body = await self._body(protocol, declared)
            except _Refused as refusal:
                _answer(protocol, refusal.response)
                return
        await rsgi.respond(protocol, self._pool, self._app, environ, body)

    async def _body(self, protocol: Any, declared: str | None) -> bytes:
        """The whole body, within BODY_SECONDS and the size limit, or _Refused."""
        if declared and (not declared.isdigit() or int(declared) > self._limit):
            raise _Refused(413, f"A form of at most {self._limit} bytes is expected.")
        try:
            body = await asyncio.wait_for(_read(protocol, self._limit, declared), BODY_SECONDS)
        except TimeoutError:
            raise _Refused(408, f"The body did not arrive within {BODY_SECONDS:g} s.") from None
        except _TooLarge:
            raise _Refused(413, f"A form of at most {self._limit} bytes is expected.") from None
        except Exception:  # the connection broke (RSGIProtocolClosed): the body is lost
            raise _Refused(400, "The body ended early.") from None
        if declared and len(body) < int(declared):
            raise _Refused(400, "The body is shorter than its Content-Length.")
        return body


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.response = Response(message + "\n", status,
                                 {"Content-Type": "text/plain; charset=utf-8"})


class _TooLarge(Exception):
    pass


async def _read(protocol: Any, limit: int, declared: str | None) -> bytes:
    """With a Content-Length (already held to the limit) in one read; a chunked body chunk
    by chunk, counted."""
    if declared:
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


def _answer(protocol: Any, response: Response) -> None:
    """An answer given before or instead of reading the body: the body (the rest of it) is
    left unread, so the connection is closed, never used again."""
    secure(response)
    response.headers["Connection"] = "close"
    protocol.response_bytes(response.status_code, response.headers.to_wsgi_list(),
                            response.get_data())
