"""The web's front door: granian's RSGI interface, so that reading a request's body never
holds an app thread.

Under WSGI the app reads the body itself, in one of the process's few app threads, and a
client that sends its headers and part of a body, then nothing, holds that thread for as
long as it likes: a handful of such connections stop every delivery. Here the body is read
on the server process's event loop, which waits on any number of stalled clients at no
cost, within BODY_SECONDS and MAX_BODY_BYTES; only a request whose body has arrived is
handed on, to a pool of `threads` threads (one database connection each): a delivery to
the route's own function (ingest.webhooks.answer), with its headers and body, without
werkzeug's request and response objects; any other request, and every request while
tracing is on, as a WSGI environ with the body in memory to the Flask app, whose route
calls the same function. A client that stops sending gets 408 and loses its connection.

What must be decided before any body is read (the allowlist's 403, the 404 of a provider
not configured, the 413 of a Content-Length over the limit) is decided here from the
headers alone, by the same function the route applies (ingest.webhooks.refusal).

Hostile requests (docs/ingress.md, "Hostile clients"; security review 2026-12c):
- Headers are bounded before any work per header (webhooks/shared/rsgi.py: at most
  MAX_HEADERS and MAX_HEADER_BYTES, else 431), and a header name holding `_` is dropped,
  as PEP 3333 servers do (werkzeug, gunicorn): in the environ `Content_Length` and
  `Content-Length` would be one name, and a client's `X_Forwarded_For` would join the
  proxy's `X-Forwarded-For`.
- A body is counted as it is read, with or without a Content-Length, and never past
  MAX_BODY_BYTES; one sent in more than `_max_pieces` pieces (a chunk a byte) is refused.
- The bodies one process holds at once (being read, or waiting for an app thread) are
  bounded by WEB_BODY_BUDGET_BYTES (`_Budget`): past it a new body waits up to
  BUDGET_WAIT_SECONDS, then gets 503 with Retry-After, unread. Bodies over SMALL_BODY may
  fill only all but an eighth of it, so a flood of large bodies never holds back a
  provider's ordinary delivery of a few kilobytes.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flask import Flask
from werkzeug.datastructures import EnvironHeaders

from webhooks.ingest import webhooks
from webhooks.shared import metrics, rsgi, tracing
from webhooks.shared.errors import BodyTimeout, InvalidPayload, PayloadTooLarge, RejectedDelivery

# A body must arrive within this long of the request's headers. A provider's delivery is
# a few kilobytes sent at once; MAX_BODY_BYTES at a slow client's pace fits well within it.
BODY_SECONDS = 10.0
# Bodies up to this size are "small" (every provider's ordinary delivery): the last eighth
# of the body budget is theirs alone.
SMALL_BODY = 65_536
# How long a body that does not fit the budget waits for room before its 503.
BUDGET_WAIT_SECONDS = 1.0


class Front:
    """An RSGI application serving a Flask (WSGI) app."""

    def __init__(self, app: Flask, threads: int) -> None:
        self._app = app
        settings = app.extensions["settings"]
        self._limit: int = settings.max_body_bytes
        # A body in more pieces than this is refused: 1-byte chunks cost a Python iteration
        # each (review 2026-12c section 15). A body at MAX_BODY_BYTES read in TCP segments
        # of the smallest MSS (536 bytes) takes under half of it.
        self._max_pieces = max(4096, self._limit // 256)
        self._budget = _Budget(settings.web_body_budget_bytes)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="web")
        # The budget's 503s on /metrics from the start, as the route's own refusals
        # (ingest.webhooks.count_from_start).
        for source in app.extensions["sources"].values():
            metrics.deliveries_rejected.labels(source.provider, source.name, Busy.reason)

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        if scope.proto != "http":
            return
        try:
            environ = rsgi.environ(scope)
        except rsgi.HeadersTooLarge as error:
            _answer(protocol, error.status, {"error": str(error)})
            return
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
        hold = _Hold(self._budget)
        if declared and not await hold.take(int(declared)):
            self._refuse(protocol, environ, Busy(
                f"{self._budget.total} bytes of bodies already held; retry later"))
            return
        try:
            await self._read_and_call(protocol, environ, declared, hold, too_large)
        finally:
            hold.give_back()

    async def _read_and_call(self, protocol: Any, environ: dict[str, Any],
                             declared: str | None, hold: _Hold,
                             too_large: PayloadTooLarge) -> None:
        try:
            async with asyncio.timeout(BODY_SECONDS):  # no task of its own, as wait_for made
                body = await self._body(protocol, int(declared) if declared else None, hold)
        except TimeoutError:
            self._refuse(protocol, environ,
                         BodyTimeout(f"body not received within {BODY_SECONDS:g} s"))
            return
        except _TooLarge:
            self._refuse(protocol, environ, too_large)
            return
        except RejectedDelivery as error:  # over the budget, or in too many pieces
            self._refuse(protocol, environ, error)
            return
        except Exception:  # the connection broke (RSGIProtocolClosed): the body is lost
            body = None
        if body is None or (declared and len(body) < int(declared)):
            self._refuse(protocol, environ, InvalidPayload(
                "body shorter than its Content-Length (client went away)"))
            return
        target = webhooks.provider_of(environ["PATH_INFO"])
        if target is None or environ["REQUEST_METHOD"] != "POST" or tracing.enabled():
            await rsgi.respond(protocol, self._pool, self._app, environ, body)
            return
        # A delivery: the route's own function (webhooks.answer), without werkzeug's
        # request and response objects around it. With tracing on, the Flask app runs it,
        # inside the request's span.
        environ["CONTENT_LENGTH"] = str(len(body))
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        provider, path = target
        source = path.partition("/")[2] or None
        address = self._app.extensions["client_address"](environ)
        answered = await asyncio.get_running_loop().run_in_executor(
            self._pool, webhooks.answer, self._app, provider, source, address,
            EnvironHeaders(environ), body)
        protocol.response_bytes(answered.status, answered.headers, answered.body)

    async def _body(self, protocol: Any, declared: int | None, hold: _Hold) -> bytes:
        """The whole body, counted piece by piece whether or not a Content-Length came:
        never more than the limit (nor than the Content-Length), never in more than
        `_max_pieces` pieces. A body without a Content-Length (chunked) takes its room in
        the budget as it comes, and fails at once past it."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in protocol:
            size += len(chunk)
            if size > self._limit or (declared is not None and size > declared):
                raise _TooLarge
            if len(chunks) >= self._max_pieces:
                raise InvalidPayload(f"body sent in more than {self._max_pieces} pieces")
            if declared is None and not hold.grow(len(chunk), size):
                raise Busy(f"{self._budget.total} bytes of bodies already held; retry later")
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _refuse(self, protocol: Any, environ: dict[str, Any], error: RejectedDelivery) -> None:
        """Answer a request refused while its body was read, and close the connection."""
        webhooks.count_rejected(self._app, environ, error)
        retry = [("retry-after", webhooks.RETRY_AFTER_SECONDS)] if error.status == 503 else []
        _answer(protocol, error.status, {"error": str(error)}, retry)


class Busy(RejectedDelivery):
    """The process holds WEB_BODY_BUDGET_BYTES of bodies already: 503, Retry-After."""

    status = 503
    reason = "busy"


class _TooLarge(Exception):
    pass


class _Budget:
    """The bytes of request bodies a process holds at once (WEB_BODY_BUDGET_BYTES): from
    the moment a body is admitted to read until the app has answered it. Used on the
    event loop only, so no lock. A body over SMALL_BODY may fill the budget only up to
    its last eighth, which is left to small ones."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0
        self._reserve = total // 8
        # Bodies waiting for room, in arrival order: (size, their future).
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []

    def fits(self, size: int, body: int) -> bool:
        """Whether `size` more bytes fit for a body of `body` bytes (so far)."""
        room = self.total - (self._reserve if body > SMALL_BODY else 0)
        return self.held + size <= room

    async def take(self, size: int) -> bool:
        """Room for a whole body of `size` bytes, waiting up to BUDGET_WAIT_SECONDS;
        False if none came."""
        if self.fits(size, size):
            self.held += size
            return True
        waiting = (size, asyncio.get_running_loop().create_future())
        self._waiting.append(waiting)
        try:
            await asyncio.wait_for(waiting[1], BUDGET_WAIT_SECONDS)
        except TimeoutError:
            return False  # not given: give_back() set no result on a cancelled future
        finally:
            if waiting in self._waiting:
                self._waiting.remove(waiting)
        return True

    def give_back(self, size: int) -> None:
        """Room given back; waiting bodies that now fit are admitted, oldest first."""
        self.held -= size
        for waiting in list(self._waiting):
            wanted, future = waiting
            if not future.done() and self.fits(wanted, wanted):
                self.held += wanted
                future.set_result(None)
                self._waiting.remove(waiting)


class _Hold:
    """One request's share of the budget, given back once, whatever happened."""

    def __init__(self, budget: _Budget) -> None:
        self._budget = budget
        self.size = 0

    async def take(self, size: int) -> bool:
        if await self._budget.take(size):
            self.size = size
            return True
        return False

    def grow(self, size: int, body: int) -> bool:
        if not self._budget.fits(size, body):
            return False
        self._budget.held += size
        self.size += size
        return True

    def give_back(self) -> None:
        size, self.size = self.size, 0
        if size:
            self._budget.give_back(size)


def _answer(protocol: Any, status: int, body: dict[str, str],
            extra: list[tuple[str, str]] | None = None) -> None:
    """A refusal: its body is left unread, so the connection is not used again."""
    headers = [("content-type", "application/json"), ("connection", "close"), *(extra or [])]
    protocol.response_bytes(status, headers, webhooks.json_body(body))

