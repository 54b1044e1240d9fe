"""A fake Slack incoming webhook and a fake Standard Webhooks receiver, over real HTTP on
loopback, for the notification tests.

    POST /slack     Slack's incoming webhook: JSON {"text": ...} -> 200 "ok"; a body without
                    `text` -> 400 "no_text", as Slack answers
    POST /webhook   the generic webhook: verified with the `standardwebhooks` library
                    (webhook-id, webhook-timestamp, webhook-signature) -> 204; a bad
                    signature -> 401, recorded apart

Every request is recorded (`requests`); the ones answered 2xx are `received`. Faults, per
path, consumed one per request:

    fail_first   the next N requests: 500 (recorded as attempts, not received)
    status       every request: this status (0: the normal answer)
    hold         requests wait (after being recorded as attempts) until `release()`

In-process: `with NotifyReceivers(secret) as fake: fake.set_mode("webhook", fail_first=1)`.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

PATHS = ("/slack", "/webhook")


@dataclass
class Modes:
    fail_first: int = 0
    status: int = 0
    hold: bool = False


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int = 0

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def webhook_id(self) -> str | None:
        return self.headers.get("webhook-id")


@dataclass
class State:
    secret: str
    modes: dict[str, Modes] = field(default_factory=lambda: defaultdict(Modes))
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    released: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def answer(self, request: Request) -> int:
        with self.lock:
            self.requests.append(request)
            modes = self.modes[request.path]
            hold, fail = modes.hold, modes.fail_first > 0
            modes.fail_first -= 1 if fail else 0
        with self.arrived:
            self.arrived.notify_all()
        if fail:
            return 500
        if hold:
            self.released.wait(timeout=120)
        if modes.status:
            return modes.status
        if request.path == "/slack":
            return 200 if isinstance(request.json.get("text"), str) else 400
        try:
            Webhook(self.secret).verify(request.body, request.headers)
        except WebhookVerificationError:
            return 401
        return 204


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = Request(self.path, headers, body)
        if self.path not in PATHS:
            status = 404
        else:
            status = self.server.state.answer(request)
        request.answered = status
        text = b"ok" if status == 200 else b""
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
        except OSError:
            pass  # the client is gone (killed while we held its request)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    state: State


class NotifyReceivers:
    def __init__(self, secret: str) -> None:
        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.state = State(secret)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def state(self) -> State:
        return self.server.state

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def slack_url(self) -> str:
        return f"{self.url}/slack"

    @property
    def webhook_url(self) -> str:
        return f"{self.url}/webhook"

    def __enter__(self) -> NotifyReceivers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def set_mode(self, path: str, **modes: Any) -> None:
        with self.state.lock:
            for name, value in modes.items():
                setattr(self.state.modes[f"/{path}"], name, value)
            if modes.get("hold"):
                self.state.released.clear()

    def reset(self) -> None:
        """Forget every request and restore the normal answers."""
        self.release()
        with self.state.lock:
            self.state.requests.clear()
            self.state.modes.clear()

    def release(self) -> None:
        with self.state.lock:
            for modes in self.state.modes.values():
                modes.hold = False
        self.state.released.set()

    def requests(self, path: str) -> list[Request]:
        with self.state.lock:
            return [r for r in self.state.requests if r.path == f"/{path}"]

    def received(self, path: str) -> list[Request]:
        """The requests answered 2xx."""
        return [r for r in self.requests(path) if 200 <= r.answered < 300]

    def wait_for(self, path: str, count: int = 1, timeout: float = 30.0) -> list[Request]:
        """Wait until `count` requests to path arrived (answered or not)."""
        with self.state.arrived:
            self.state.arrived.wait_for(lambda: len(self.requests(path)) >= count, timeout)
        return self.requests(path)
