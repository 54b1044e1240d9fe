"""Fake receivers for Alertmanager's notifications over real HTTP: a Slack incoming webhook
and generic webhook endpoints (a paging tool, a dead man's switch), on loopback.

    POST /slack/<name>     as Slack's incoming webhook: JSON with `text` or `attachments`
                           -> 200 `ok`; not JSON -> 400 `invalid_payload`; neither field
                           -> 400 `no_text` (Slack's answers, as plain text)
    POST /webhook/<name>   any JSON (Alertmanager's webhook payload) -> 200

Every accepted request is recorded with its path, parsed JSON and arrival time, so a test
can ask which alerts reached which receiver, and how often.

In-process: `with FakeAlertReceivers() as fake: ... fake.posts("/slack/page")`.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Post:
    path: str
    body: dict[str, Any]
    at: float  # time.monotonic() on arrival


def slack_alertnames(body: dict[str, Any]) -> list[str]:
    """The alert names a Slack message from Alertmanager's default title names: its title
    is `[FIRING:n] <group label values> ...`, the first of them the alertname (every
    route here groups by alertname first)."""
    names = []
    for attachment in body.get("attachments", []):
        words = str(attachment.get("title", "")).split()
        if len(words) > 1:
            names.append(words[1])
    return names


def webhook_alertnames(body: dict[str, Any]) -> list[str]:
    """The alert names in Alertmanager's webhook payload (version 4)."""
    return [alert["labels"]["alertname"] for alert in body.get("alerts", [])]


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        slack = self.path.startswith("/slack/")
        if not isinstance(body, dict) or not (slack or self.path.startswith("/webhook/")):
            self._answer(400 if slack else 404, "invalid_payload" if slack else "not found")
            return
        if slack and not (body.get("text") or body.get("attachments")):
            self._answer(400, "no_text")
            return
        self.server.record(Post(self.path, body, time.monotonic()))
        self._answer(200, "ok")

    def _answer(self, status: int, text: str) -> None:
        payload = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self._lock = threading.Lock()
        self.received: list[Post] = []

    def record(self, post: Post) -> None:
        with self._lock:
            self.received.append(post)


class FakeAlertReceivers:
    def __init__(self, port: int = 0) -> None:
        self._server = Server(port)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def posts(self, path: str) -> list[Post]:
        with self._server._lock:
            return [post for post in self._server.received if post.path == path]

    def all_posts(self) -> list[Post]:
        with self._server._lock:
            return list(self._server.received)

    def __enter__(self) -> FakeAlertReceivers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
