"""Fake provider APIs over real HTTP, for the reconciliation tests: the parts of each
provider's event API that reconciliation reads, with the providers' JSON shapes, ordering
and pagination as their API references describe them. What they serve is built from the
providers' published fixtures (tests/fakes/provider_events.py); the tests drive this fake
through the official `stripe` client, as production does.

    Stripe   GET /v1/events?created[gte|gt|lte|lt]=T&limit=N
                 [&starting_after=ID | &ending_before=ID]
             -> {object: "list", data: [events, newest first], has_more, url}; with
                starting_after the page is the N events older than ID, with ending_before
                the N events newer than ID (still newest first), has_more counting in
                the direction of paging; an unknown cursor is a 404 resource_missing
    Stripe v2, what the `stripe` library calls for thin events (event destinations):
             GET /v2/core/events/<id>  -> the full event (`object: "v2.core.event"`)
             GET /v2/core/events?created[gte]=ISO&limit=N[&page=TOKEN]
                 -> {data: [events, newest first], next_page_url, previous_page_url}, the
                    page links relative paths carrying the whole query, as the v2 API's
             GET /v1/invoices/<id> (any related object by its `url`)  -> the object
             Objects and events are kept per account: a connected account's are found only
             with its `Stripe-Context` (or `Stripe-Account`) header, the platform's only
             without one; every such request's headers are kept in `stripe_headers`.
    Stripe Connect, for a Connect source's reconciliation:
             GET /v1/accounts?limit=N[&starting_after=ID]  -> {object: "list", data:
                 [accounts, newest first, from Stripe's published `account`], has_more,
                 url: "/v1/accounts"}
             GET /v1/events with `Stripe-Account: ACCT`  -> the connected account's own
                 events (`stripe_account_events[ACCT]`), paged as the platform's are
    Stripe keys: STRIPE_KEY is the platform's; each key of `stripe_key_events` is another
             account's (a second Stripe account, its own source), whose `GET /v1/events`
             lists those events only. Every Stripe request's (path, key, Stripe-Account)
             is kept in `stripe_auth`, and its time in `stripe_times`.
    Paddle   GET /events?per_page=N[&after=ID][&order_by=id[ASC]|id[DESC]]
             -> {data: [events in id order, ascending unless asked], meta: {request_id,
                 pagination: {per_page, next, has_more, estimated_total}}}
    GitHub   GET /<hook>/deliveries?per_page=N[&cursor=C]  -> [deliveries, newest first,
             in the `hook-delivery-items` shape], with a `Link: <...>; rel="next"` header
             while more remain
             GET /<hook>/deliveries/<id>  -> the whole delivery (`hook-delivery`)

Every request must carry the credentials (Stripe: Bearer of the key; Paddle: Bearer;
GitHub: Bearer token); others get 401. Faults, each consumed per request:

    rate_limited   the next N requests: 429 with Retry-After: 1
    stripe_rate    Stripe's rate limit: a Stripe request above this many in the last
                   second is answered 429 with Retry-After: 1 (counted in stripe_429s)
    fail_after     after this many more successful requests, every request: 500
                   (until fail_after is set to None again)
    fail_next      the next N requests: 500 (after rate_limited's)
    slow_next      the next N requests answer after slow_seconds (a client's timeout)
    next_base      Paddle's `next` and GitHub's `Link` point to this base (another host)
    refuse_body    every request: 400 with this text as its body (not JSON), as sent

In-process: `with FakeProviderApis() as fake: fake.state.stripe_events = [...]`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from tests.fakes.provider_events import github_delivery_item

STRIPE_KEY = "sk_test_fake"
PADDLE_KEY = "pdl_fake"
GITHUB_TOKEN = "ghp_fake"
HOOK = "repos/acme/shop/hooks/12"


@dataclass
class State:
    stripe_events: list[dict[str, Any]] = field(default_factory=list)
    stripe_sorted: tuple[tuple[int, int], list[dict[str, Any]]] = ((0, -1), [])
    paddle_events: list[dict[str, Any]] = field(default_factory=list)
    # GitHub deliveries, whole (provider_events.github_delivery)
    github_deliveries: list[dict[str, Any]] = field(default_factory=list)
    # Stripe v2: full events and related objects, by (account or None, id or URL path)
    stripe_v2_events: dict[tuple[str | None, str], dict[str, Any]] = field(default_factory=dict)
    stripe_objects: dict[tuple[str | None, str], dict[str, Any]] = field(default_factory=dict)
    # (path, Stripe-Context, Stripe-Account) of each Stripe v2 or object request
    stripe_headers: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    # Connect: the connected accounts (published `account` objects), and their own events
    stripe_accounts: list[dict[str, Any]] = field(default_factory=list)
    stripe_account_events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stripe_key_events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stripe_auth: list[tuple[str, str, str | None]] = field(default_factory=list)
    stripe_times: list[float] = field(default_factory=list)  # every Stripe request's
    stripe_rate: int | None = None
    stripe_429s: int = 0
    rate_limited: int = 0
    fail_next: int = 0
    slow_next: int = 0
    slow_seconds: float = 0.0
    fail_after: int | None = None
    next_base: str | None = None  # pagination links to this base instead of our own
    refuse_body: str | None = None  # every request: 400 with this text as its body
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

    def serve_stripe_v2(self, event: dict[str, Any],
                        related: dict[str, Any] | None = None) -> None:
        """Serve a full v2 event, and its related object at its `url`, in the event's
        account (its `context`)."""
        account = event.get("context")
        with self.state.lock:
            self.state.stripe_v2_events[(account, event["id"])] = event
            if related is not None:
                url = event["related_object"]["url"]
                self.state.stripe_objects[(account, url)] = related

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
                fault = _fault(state) or self._stripe_limit(parts.path)
                slow = _slow(state)
            if slow:
                time.sleep(slow)
            if fault == 429:
                self._send(429, {"error": {"type": "rate_limit_error"}},
                           {"Retry-After": "1"})
                return
            if fault == 500:
                self._send(500, {"error": {"message": "internal error"}})
                return
            if state.refuse_body is not None:
                self._send_text(400, state.refuse_body)
                return
            try:
                status, body, headers = self._route(parts.path, query)
            except KeyError:
                status, body, headers = 404, {"message": "Not Found"}, {}
            self._send(status, body, headers)

        def _route(self, path: str, query: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
            auth = self.headers.get("Authorization", "")
            base = state.next_base or f"http://{self.headers['Host']}"
            if path == "/v1/events":
                events = self._stripe_events(auth)
                if events is None:
                    return 401, {"error": {"message": "Invalid API Key"}}, {}
                status, body = _stripe_page(state, query, events)
                return status, body, {}
            if path == "/v1/accounts":
                if auth != f"Bearer {STRIPE_KEY}" or self.headers.get("Stripe-Account"):
                    return 401, {"error": {"message": "Invalid API Key"}}, {}
                return 200, _stripe_accounts_page(state, query), {}
            if path.startswith(("/v2/", "/v1/invoices/")):
                if auth != f"Bearer {STRIPE_KEY}":
                    return 401, {"error": {"type": "invalid_request_error",
                                           "message": "Invalid API Key"}}, {}
                return self._stripe_v2(path, query)
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

        def _stripe_limit(self, path: str) -> int | None:
            """Stripe's rate limit (stripe_rate a second), under state.lock."""
            if not path.startswith(("/v1/", "/v2/")):
                return None
            now = time.monotonic()
            key = self.headers.get("Authorization", "").removeprefix("Bearer ")
            state.stripe_auth.append((path, key, self.headers.get("Stripe-Account")))
            state.stripe_times.append(now)
            if state.stripe_rate is None:
                return None
            recent = sum(1 for at in state.stripe_times[-4 * state.stripe_rate:]
                         if at > now - 1.0)
            if recent > state.stripe_rate:
                state.stripe_429s += 1
                return 429
            return None

        def _stripe_events(self, auth: str) -> list[dict[str, Any]] | None:
            """The events the key (and Stripe-Account) may list; None: a bad key."""
            account = self.headers.get("Stripe-Account")
            if auth == f"Bearer {STRIPE_KEY}":
                if account:
                    return state.stripe_account_events.get(account, [])
                return state.stripe_events
            return state.stripe_key_events.get(auth.removeprefix("Bearer "))

        def _stripe_v2(self, path: str, query: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
            context = self.headers.get("Stripe-Context")
            account = context or self.headers.get("Stripe-Account")
            with state.lock:
                state.stripe_headers.append((path, context, self.headers.get("Stripe-Account")))
            if path == "/v2/core/events":
                return 200, _stripe_v2_page(state, query, account), {}
            if path.startswith("/v2/core/events/"):
                found = state.stripe_v2_events.get((account, unquote(path.rsplit("/", 1)[1])))
            else:
                found = state.stripe_objects.get((account, path))
            if found is None:
                return 404, {"error": {"type": "invalid_request_error",
                                       "code": "resource_missing",
                                       "message": f"No such object: '{path}'"}}, {}
            return 200, found, {}

        def _send_text(self, status: int, text: str) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

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
    if state.fail_next > 0:
        state.fail_next -= 1
        return 500
    if state.fail_after is not None:
        if state.fail_after <= 0:
            return 500
        state.fail_after -= 1
    return None


def _slow(state: State) -> float:
    if state.slow_next > 0:
        state.slow_next -= 1
        return state.slow_seconds
    return 0.0


def _stripe_v2_page(state: State, query: dict[str, str], account: str | None) -> dict[str, Any]:
    """One page of `GET /v2/core/events` of one account, newest first; `page` is an offset
    here (Stripe's is opaque), and the links carry the rest of the query, as Stripe's do."""
    limit = min(int(query.get("limit", "20")), 100)
    own = [e for (owner, _), e in state.stripe_v2_events.items() if owner == account]
    events = sorted(own, key=lambda e: (e["created"], e["id"]), reverse=True)
    if "created[gte]" in query:
        events = [e for e in events if e["created"] >= query["created[gte]"]]
    offset = int(query.get("page", "0"))
    rest = {key: value for key, value in query.items() if key != "page"}

    def link(at: int) -> str:
        return "/v2/core/events?" + urlencode({**rest, "page": at})

    return {"data": events[offset:offset + limit],
            "next_page_url": link(offset + limit) if offset + limit < len(events) else None,
            "previous_page_url": link(max(offset - limit, 0)) if offset else None}


_STRIPE_CREATED = {"gte": int.__ge__, "gt": int.__gt__, "lte": int.__le__, "lt": int.__lt__}


def _stripe_accounts_page(state: State, query: dict[str, str]) -> dict[str, Any]:
    limit = min(int(query.get("limit", "10")), 100)
    accounts = sorted(state.stripe_accounts, key=lambda a: (a["created"], a["id"]),
                      reverse=True)
    if "starting_after" in query:
        ids = [account["id"] for account in accounts]
        accounts = accounts[ids.index(query["starting_after"]) + 1:]
    return {"object": "list", "url": "/v1/accounts", "has_more": len(accounts) > limit,
            "data": accounts[:limit]}


def _stripe_page(state: State, query: dict[str, str],
                 listed: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    limit = min(int(query.get("limit", "10")), 100)
    events = (_newest_first(state) if listed is state.stripe_events else
              sorted(listed, key=lambda e: (e["created"], e["id"]), reverse=True))
    for op, test in _STRIPE_CREATED.items():
        if f"created[{op}]" in query:
            bound = int(query[f"created[{op}]"])
            events = [e for e in events if test(e["created"], bound)]
    ids = [e["id"] for e in listed]
    cursor = query.get("starting_after") or query.get("ending_before")
    if cursor and cursor not in ids:
        return 404, {"error": {"type": "invalid_request_error", "code": "resource_missing",
                               "message": f"No such event: '{cursor}'", "param": "id"}}
    if "starting_after" in query:
        position = _position(listed, cursor)
        events = [e for e in events if (e["created"], e["id"]) < position]
        page, more = events[:limit], len(events) > limit
    elif "ending_before" in query:
        position = _position(listed, cursor)
        events = [e for e in events if (e["created"], e["id"]) > position]
        page, more = events[-limit:], len(events) > limit
    else:
        page, more = events[:limit], len(events) > limit
    return 200, {"object": "list", "url": "/v1/events", "has_more": more, "data": page}


def _newest_first(state: State) -> list[dict[str, Any]]:
    """The events in Stripe's list order, sorted again only when the list changed."""
    with state.lock:
        key, ordered = state.stripe_sorted
        if key != (id(state.stripe_events), len(state.stripe_events)):
            ordered = sorted(state.stripe_events, key=lambda e: (e["created"], e["id"]),
                             reverse=True)
            state.stripe_sorted = ((id(state.stripe_events), len(state.stripe_events)), ordered)
        return ordered


def _position(listed: list[dict[str, Any]], event_id: str | None) -> tuple[int, str]:
    event = next(e for e in listed if e["id"] == event_id)
    return (event["created"], event["id"])


def _paddle_page(state: State, query: dict[str, str], base: str) -> dict[str, Any]:
    per_page = min(int(query.get("per_page", "50")), 200)
    order = query.get("order_by", "id[ASC]")
    descending = order.upper() == "ID[DESC]"
    events = sorted(state.paddle_events, key=lambda e: e["event_id"], reverse=descending)
    after = query.get("after")
    if after:
        events = [e for e in events if (e["event_id"] < after if descending
                                        else e["event_id"] > after)]
    page, more = events[:per_page], len(events) > per_page
    query_next = urlencode({"after": page[-1]["event_id"], "order_by": order,
                            "per_page": per_page}) if page else ""
    following = f"{base}/events?{query_next}" if page else None
    return {"data": page, "meta": {"request_id": "2a1e8b96-7c5f-4f1d-9d7a-fake00000000",
                                   "pagination": {"per_page": per_page, "next": following,
                                                  "has_more": more,
                                                  "estimated_total": len(state.paddle_events)}}}


def _github_page(state: State, query: dict[str, str],
                 base: str) -> tuple[list[dict[str, Any]], str | None]:
    per_page = min(int(query.get("per_page", "30")), 100)
    deliveries = sorted(state.github_deliveries, key=lambda d: d["id"], reverse=True)
    cursor = int(query.get("cursor", "0"))
    page = [github_delivery_item(d) for d in deliveries[cursor:cursor + per_page]]
    if cursor + per_page >= len(deliveries):
        return page, None
    query_next = urlencode({"per_page": per_page, "cursor": cursor + per_page})
    return page, f'<{base}/{HOOK}/deliveries?{query_next}>; rel="next"'


def _github_delivery(state: State, delivery_id: int) -> dict[str, Any]:
    with state.lock:
        state.detail_fetches[delivery_id] += 1
    found = [d for d in state.github_deliveries if d["id"] == delivery_id]
    if not found:
        raise KeyError(delivery_id)
    return found[0]
