"""Fake provider APIs over real HTTP, for the reconciliation tests: the parts of each
provider's event API that reconciliation reads, with the providers' JSON shapes and
pagination, as their API references describe them.

    Stripe   GET /v1/events?created[gte]=T&limit=N&starting_after=ID
             -> {object: "list", data: [events, newest first], has_more, url}
    Paddle   GET /events?per_page=N[&after=ID]
             -> {data: [events, oldest first], meta: {pagination: {per_page, next,
                 has_more, estimated_total}}}
    GitHub   GET /<hook>/deliveries?per_page=N[&cursor=C]  -> [deliveries, newest first],
             with a `Link: <...>; rel="next"` header while more remain
             GET /<hook>/deliveries/<id>  -> {id, guid, event, request: {headers, payload}}

Every request must carry the credentials (Stripe: Bearer of the key; Paddle: Bearer;
GitHub: Bearer token); others get 401. Faults, each consumed per request:

    rate_limited   the next N requests: 429 with Retry-After: 1
    fail_after     after this many more successful requests, every request: 500
                   (until fail_after is set to None again)

In-process: `with FakeProviderApis() as fake: fake.stripe_events = [...]`.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

STRIPE_KEY = "sk_test_fake"
PADDLE_KEY = "pdl_fake"
GITHUB_TOKEN = "ghp_fake"
HOOK = "repos/acme/shop/hooks/12"


@dataclass
class State:
    stripe_events: list[dict[str, Any]] = field(default_factory=list)
    paddle_events: list[dict[str, Any]] = field(default_factory=list)
    # GitHub deliveries: {id, guid, delivered_at, event, redelivery, payload}
    github_deliveries: list[dict[str, Any]] = field(default_factory=list)
    rate_limited: int = 0
    fail_after: int | None = None
    requests: Counter[str] = field(default_factory=Counter)
    detail_fetches: Counter[int] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeProviderApis:
    def __init__(self) -> None:
        self.state = State()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeProviderApis:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = dict(parse_qsl(parts.query))
            with state.lock:
                state.requests[parts.path] += 1
                fault = _fault(state)
            if fault == 429:
                self._send(429, {"error": {"type": "rate_limit_error"}},
                           {"Retry-After": "1"})
                return
            if fault == 500:
                self._send(500, {"error": {"message": "internal error"}})
                return
            try:
                status, body, headers = self._route(parts.path, query)
            except KeyError:
                status, body, headers = 404, {"message": "Not Found"}, {}
            self._send(status, body, headers)

        def _route(self, path: str, query: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
            auth = self.headers.get("Authorization", "")
            base = f"http://{self.headers['Host']}"
            if path == "/v1/events":
                if auth != f"Bearer {STRIPE_KEY}":
                    return 401, {"error": {"message": "Invalid API Key"}}, {}
                return 200, _stripe_page(state, query), {}
            if path == "/events":
                if auth != f"Bearer {PADDLE_KEY}":
                    return 401, {"error": {"code": "authentication_malformed"}}, {}
                return 200, _paddle_page(state, query, base), {}
            if path.startswith(f"/{HOOK}/deliveries"):
                if auth != f"Bearer {GITHUB_TOKEN}":
                    return 401, {"message": "Bad credentials"}, {}
                rest = path.removeprefix(f"/{HOOK}/deliveries").strip("/")
                if rest:
                    return 200, _github_delivery(state, int(rest)), {}
                body, link = _github_page(state, query, base)
                return 200, body, ({"Link": link} if link else {})
            raise KeyError(path)

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _fault(state: State) -> int | None:
    if state.rate_limited > 0:
        state.rate_limited -= 1
        return 429
    if state.fail_after is not None:
        if state.fail_after <= 0:
            return 500
        state.fail_after -= 1
    return None


def _stripe_page(state: State, query: dict[str, str]) -> dict[str, Any]:
    gte = int(query.get("created[gte]", "0"))
    limit = min(int(query.get("limit", "10")), 100)
    events = sorted((e for e in state.stripe_events if e["created"] >= gte),
                    key=lambda e: (e["created"], e["id"]), reverse=True)
    after = query.get("starting_after")
    if after:
        ids = [e["id"] for e in events]
        events = events[ids.index(after) + 1:]
    return {"object": "list", "url": "/v1/events", "has_more": len(events) > limit,
            "data": events[:limit]}


def _paddle_page(state: State, query: dict[str, str], base: str) -> dict[str, Any]:
    per_page = min(int(query.get("per_page", "50")), 200)
    events = sorted(state.paddle_events, key=lambda e: e["event_id"])
    after = query.get("after")
    if after:
        events = [e for e in events if e["event_id"] > after]
    page, more = events[:per_page], len(events) > per_page
    query_next = urlencode({"after": page[-1]["event_id"], "per_page": per_page}) if page else ""
    following = f"{base}/events?{query_next}" if page else None
    return {"data": page, "meta": {"request_id": "req_fake", "pagination": {
        "per_page": per_page, "next": following, "has_more": more,
        "estimated_total": len(state.paddle_events)}}}


def _github_page(state: State, query: dict[str, str],
                 base: str) -> tuple[list[dict[str, Any]], str | None]:
    per_page = min(int(query.get("per_page", "30")), 100)
    deliveries = sorted(state.github_deliveries, key=lambda d: d["id"], reverse=True)
    cursor = int(query.get("cursor", "0"))
    page = deliveries[cursor:cursor + per_page]
    summary = [{k: d[k] for k in ("id", "guid", "delivered_at", "redelivery", "event")}
               | {"status": "OK", "status_code": 200, "action": None} for d in page]
    if cursor + per_page >= len(deliveries):
        return summary, None
    query_next = urlencode({"per_page": per_page, "cursor": cursor + per_page})
    return summary, f'<{base}/{HOOK}/deliveries?{query_next}>; rel="next"'


def _github_delivery(state: State, delivery_id: int) -> dict[str, Any]:
    with state.lock:
        state.detail_fetches[delivery_id] += 1
    found = [d for d in state.github_deliveries if d["id"] == delivery_id]
    if not found:
        raise KeyError(delivery_id)
    delivery = found[0]
    return {"id": delivery["id"], "guid": delivery["guid"], "event": delivery["event"],
            "delivered_at": delivery["delivered_at"], "redelivery": delivery["redelivery"],
            "request": {"headers": {"X-GitHub-Event": delivery["event"],
                                    "X-GitHub-Delivery": delivery["guid"]},
                        "payload": delivery["payload"]},
            "response": {"headers": {}, "payload": "ok"}}
