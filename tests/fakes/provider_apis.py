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
    Stripe, creating objects (form-encoded, as the `stripe` library sends them):
             POST /v1/refunds       charge | payment_intent, amount, reason, metadata[K]
                 -> a Refund (provider_events.stripe_refund): a new `re_...` id, `created`
                    now, the params applied
             POST /v1/credit_notes  invoice, amount | lines[i][type, invoice_line_item,
                 quantity, amount, unit_amount, description], reason, memo, metadata[K]
                 -> a CreditNote (provider_events.stripe_credit_note): a new `cn_...` id;
                    when the invoice is served here (`stripe_objects`), its customer and
                    currency, and an `invoice_line_item` line's amount from its line
             Stripe's other params of these endpoints are accepted and ignored; an
             unknown param, or a missing or bad one: 400 invalid_request_error (not saved
             under the key). Other POSTs under /v1/: 404; POSTs elsewhere: 501, as before.
             The credentials are checked as for GETs (401). The GET faults below leave
             POSTs alone (stripe_rate counts them too); the POST faults are below.
    Stripe idempotency (docs.stripe.com/api/idempotent_requests), by `Idempotency-Key`,
             scoped by the secret key:
             - the first request with a key holds it while it executes; its answer (status
               and body, a 500 included) is saved once the endpoint began executing (after
               validation: a 400 for bad params is not saved, nor a 401, 404, 429 or a
               `fail_before` 500)
             - the same key again, with the same method, path, form params (in any order)
               and Stripe-Account: the saved answer, byte for byte, with
               `Idempotent-Replayed: true` and `Original-Request: <first Request-Id>`
             - other params (or another Stripe-Account: stricter than Stripe, whose
               scoping across connected accounts is not documented): 400 idempotency_error
             - while the first is still executing: 409 idempotency_error,
               `code: idempotency_key_in_use`
             - `key_lifetime_seconds` after its first use the key is new again
             Each POST's (path, key, Stripe-Account, replayed) is kept in `stripe_posts`,
             each object created under a key in `created[key]` (its id), and every
             created object, by id, in `posted_objects`. Every POST answer carries
             `Request-Id` and echoes `Idempotency-Key`.
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

Stripe POST faults (the GET ones above leave POSTs alone):

    fail_before        the next N POSTs: 500 api_error before anything is done (the key
                       is not taken, nothing is saved: a retry with the key executes)
    drop_after_create  the next N POSTs that execute: the object is created and the answer
                       saved under the key, then the connection is closed unanswered (a
                       lost answer; the `stripe` library raises APIConnectionError)
    fail_after_create  the next N POSTs that execute: the object is created, the answer
                       saved (and sent) is a 500 api_error, replayed for that key
    in_flight_seconds  every POST that executes holds its key this long before it
                       executes (a concurrent request with the key gets the 409)

In-process: `with FakeProviderApis() as fake: fake.state.stripe_events = [...]`.
"""

from __future__ import annotations

import json
import re
import secrets
import string
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from tests.fakes.provider_events import (
    github_delivery_item,
    stripe_credit_note,
    stripe_refund,
)

STRIPE_KEY = "sk_test_fake"
PADDLE_KEY = "pdl_fake"
GITHUB_TOKEN = "ghp_fake"
HOOK = "repos/acme/shop/hooks/12"


@dataclass
class Saved:
    """What Stripe keeps for an idempotency key: the request it was first used with, and
    its answer once that request has executed (None while it still executes)."""

    fingerprint: tuple[Any, ...]
    first_used: float  # time.monotonic()
    status: int | None = None
    data: bytes = b""
    request_id: str = ""


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
    # Stripe POSTs: idempotency keys by (secret key, Idempotency-Key), and their lifetime
    idempotency: dict[tuple[str, str], Saved] = field(default_factory=dict)
    key_lifetime_seconds: float = 24 * 60 * 60
    # (path, Idempotency-Key, Stripe-Account, replayed) of each Stripe POST
    stripe_posts: list[tuple[str, str | None, str | None, bool]] = field(default_factory=list)
    created: dict[str, list[str]] = field(default_factory=dict)  # key -> ids of objects
    posted_objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> object
    fail_before: int = 0
    drop_after_create: int = 0
    fail_after_create: int = 0
    in_flight_seconds: float = 0.0
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

        def do_POST(self) -> None:
            parts = urlsplit(self.path)
            if not parts.path.startswith("/v1/"):
                # as BaseHTTPRequestHandler answers a method it has no do_<method> for
                self.send_error(501, f"Unsupported method ({self.command!r})")
                return
            length = int(self.headers.get("Content-Length") or 0)
            form = self.rfile.read(length).decode() if length else ""
            path = parts.path
            key = self.headers.get("Idempotency-Key")
            account = self.headers.get("Stripe-Account")
            auth = self.headers.get("Authorization", "").removeprefix("Bearer ")
            request_id = _stripe_id("req_")
            headers = {"Request-Id": request_id, **({"Idempotency-Key": key} if key else {})}
            with state.lock:
                state.requests[path] += 1
                limited = self._stripe_limit(path)
                post = len(state.stripe_posts)
                state.stripe_posts.append((path, key, account, False))
                before = (not limited and state.fail_before > 0
                          and auth in (STRIPE_KEY, *state.stripe_key_events))
                if before:
                    state.fail_before -= 1
            if limited:
                self._send(429, {"error": {"type": "rate_limit_error"}},
                           {"Retry-After": "1", **headers})
                return
            if auth != STRIPE_KEY and auth not in state.stripe_key_events:
                self._send(401, {"error": {"type": "invalid_request_error", "message":
                                           f"Invalid API Key provided: {auth}"}}, headers)
                return
            if before:
                self._send(500, _STRIPE_500, headers)
                return
            create = _STRIPE_CREATES.get(path)
            if create is None:
                self._send(404, _stripe_invalid(
                    f"Unrecognized request URL (POST: {path}). Please see "
                    "https://stripe.com/docs or we can help at https://support.stripe.com/.",
                    None), headers)
                return
            pairs = parse_qsl(form, keep_blank_values=True)
            fingerprint = ("POST", path, tuple(sorted(pairs)), account)
            scope = (auth, key) if key else None
            with state.lock:
                held = state.in_flight_seconds
                answer = _stripe_idempotent(state, scope, fingerprint, request_id)
                if answer is not None and answer[2].get("Idempotent-Replayed"):
                    state.stripe_posts[post] = (path, key, account, True)
            if answer is not None:
                status, data, extra = answer
                self._send_data(status, data, {**headers, **extra})
                return
            if held:
                time.sleep(held)
            try:
                params = _nested_form(pairs)
                with state.lock:
                    obj = create(state, params, account)
            except _Invalid as invalid:
                with state.lock:  # not saved: the key is free again
                    if scope is not None:
                        state.idempotency.pop(scope, None)
                self._send(400, _stripe_invalid(invalid.message, invalid.param), headers)
                return
            except Exception:
                with state.lock:
                    if scope is not None:
                        state.idempotency.pop(scope, None)
                raise
            with state.lock:
                state.posted_objects[obj["id"]] = obj
                if key:
                    state.created.setdefault(key, []).append(obj["id"])
                status, body = 200, obj
                if state.fail_after_create > 0:
                    state.fail_after_create -= 1
                    status, body = 500, _STRIPE_500
                data = json.dumps(body).encode()
                if scope is not None:
                    saved = state.idempotency[scope]
                    saved.status, saved.data, saved.request_id = status, data, request_id
                drop = state.drop_after_create > 0
                if drop:
                    state.drop_after_create -= 1
            if drop:  # the answer is lost: the connection closes with nothing sent
                self.close_connection = True
                return
            self._send_data(status, data, headers)

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
            self._send_data(status, json.dumps(body).encode(), headers)

        def _send_data(self, status: int, data: bytes,
                       headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


_STRIPE_500 = {"error": {"type": "api_error", "message": "An unknown error occurred"}}
_ID_CHARACTERS = string.ascii_letters + string.digits


def _stripe_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ID_CHARACTERS) for _ in range(24))


def _stripe_invalid(message: str, param: str | None) -> dict[str, Any]:
    error: dict[str, Any] = {"type": "invalid_request_error", "message": message}
    if param is not None:
        error["param"] = param
    return {"error": error}


def _stripe_idempotent(state: State, scope: tuple[str, str] | None,
                       fingerprint: tuple[Any, ...],
                       request_id: str) -> tuple[int, bytes, dict[str, str]] | None:
    """Under state.lock: the answer the key gives (a replay, or its 400 or 409), or None
    when the request is to execute (the key, if any, then held by it)."""
    if scope is None:
        return None
    key = scope[1]
    now = time.monotonic()
    saved = state.idempotency.get(scope)
    if (saved is not None and saved.status is not None
            and now - saved.first_used >= state.key_lifetime_seconds):
        saved = None  # pruned: the key is new again
    if saved is None:
        state.idempotency[scope] = Saved(fingerprint, now)
        return None
    if saved.status is None:
        return 409, json.dumps({"error": {
            "type": "idempotency_error", "code": "idempotency_key_in_use",
            "message": "There is currently another in-progress request using this "
                       "Idempotent Key (that probably means you submitted twice, and the "
                       f"other request is still going through): {key}. Please try again "
                       "later."}}).encode(), {}
    if saved.fingerprint != fingerprint:
        return 400, json.dumps({"error": {
            "type": "idempotency_error",
            "message": "Keys for idempotent requests can only be used with the same "
                       "parameters they were first used with. Try using a key other than "
                       f"'{key}' if you meant to execute a different request."}}).encode(), {}
    return saved.status, saved.data, {"Idempotent-Replayed": "true",
                                      "Original-Request": saved.request_id}


class _Invalid(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param = message, param


def _nested_form(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Form params as Stripe reads them: `a[b][0][c]=v` -> {"a": {"b": [{"c": "v"}]}}."""
    root: dict[str, Any] = {}
    for name, value in pairs:
        head = name.split("[", 1)[0]
        subscripts = re.findall(r"\[([^\]]*)\]", name[len(head):])
        *branches, leaf = [head, *subscripts]
        node = root
        for part in branches:
            node = node.setdefault(part or str(len(node)), {})
            if not isinstance(node, dict):
                raise _Invalid(f"Invalid value for {name}", name)
        node[leaf or str(len(node))] = value
    return _listed(root)


def _listed(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    items = {key: _listed(value) for key, value in node.items()}
    if items and all(key.isdigit() for key in items):
        return [items[key] for key in sorted(items, key=int)]
    return items


def _known(params: dict[str, Any], known: frozenset[str]) -> None:
    for name in params:
        if name not in known:
            raise _Invalid(f"Received unknown parameter: {name}", name)


def _integer(params: dict[str, Any], name: str, label: str | None = None) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.isdigit():
        raise _Invalid(f"Invalid integer: {value}", label or name)
    return int(value)


def _reason(params: dict[str, Any], allowed: tuple[str, ...]) -> str | None:
    reason = params.get("reason")
    if reason is None or reason == "":
        return None
    if reason not in allowed:
        choices = ", ".join(allowed[:-1]) + f", or {allowed[-1]}"
        raise _Invalid(f"Invalid reason: must be one of {choices}", "reason")
    return str(reason)


def _metadata(params: dict[str, Any]) -> dict[str, str]:
    metadata = params.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise _Invalid("Invalid object", "metadata")
    return {str(k): str(v) for k, v in metadata.items()}


_REFUND_PARAMS = frozenset({
    "charge", "payment_intent", "amount", "reason", "metadata", "expand", "currency",
    "customer", "instructions_email", "origin", "refund_application_fee",
    "reverse_transfer"})


def _create_refund(state: State, params: dict[str, Any], account: str | None) -> dict[str, Any]:
    """Under state.lock: the Refund `POST /v1/refunds` creates (or _Invalid)."""
    _known(params, _REFUND_PARAMS)
    charge, intent = params.get("charge") or None, params.get("payment_intent") or None
    if charge is None and intent is None:
        raise _Invalid("One of the following params should be provided for this request: "
                       "payment_intent or charge.")
    return stripe_refund(_stripe_id("re_"), int(time.time()), charge=charge,
                         payment_intent=intent, amount=_integer(params, "amount"),
                         reason=_reason(params, ("duplicate", "fraudulent",
                                                 "requested_by_customer")),
                         metadata=_metadata(params))


_CREDIT_NOTE_PARAMS = frozenset({
    "invoice", "amount", "lines", "reason", "memo", "metadata", "expand", "credit_amount",
    "effective_at", "email_type", "out_of_band_amount", "refund_amount", "refunds",
    "shipping_cost"})
_LINE_PARAMS = frozenset({"type", "invoice_line_item", "quantity", "amount", "unit_amount",
                          "unit_amount_decimal", "description", "metadata", "tax_rates",
                          "tax_amounts", "discount_amounts", "pretax_credit_amounts"})


def _create_credit_note(state: State, params: dict[str, Any],
                        account: str | None) -> dict[str, Any]:
    """Under state.lock: the CreditNote `POST /v1/credit_notes` creates (or _Invalid)."""
    _known(params, _CREDIT_NOTE_PARAMS)
    invoice_id = params.get("invoice")
    if not invoice_id:
        raise _Invalid("Missing required param: invoice.", "invoice")
    raw_lines = params.get("lines") or []
    if not isinstance(raw_lines, list):
        raise _Invalid("Invalid array", "lines")
    if "amount" not in params and not raw_lines and "shipping_cost" not in params:
        raise _Invalid("One of the following params should be provided for this request: "
                       "amount, lines or shipping_cost.")
    invoice = state.stripe_objects.get((account, f"/v1/invoices/{invoice_id}"))
    invoice_lines = {line["id"]: line for line in
                     (invoice or {}).get("lines", {}).get("data", [])}
    lines = []
    for n, raw in enumerate(raw_lines):
        label = f"lines[{n}]"
        if not isinstance(raw, dict):
            raise _Invalid("Invalid object", label)
        for name in raw:
            if name not in _LINE_PARAMS:
                raise _Invalid(f"Received unknown parameter: {label}[{name}]",
                               f"{label}[{name}]")
        kind = raw.get("type")
        if kind not in ("invoice_line_item", "custom_line_item"):
            raise _Invalid("Invalid type: must be one of invoice_line_item or "
                           "custom_line_item", f"{label}[type]")
        line: dict[str, Any] = {"type": kind}
        for name in ("quantity", "amount", "unit_amount"):
            value = _integer(raw, name, f"{label}[{name}]")
            if value is not None:
                line[name] = value
        for name in ("description", "metadata"):
            if name in raw:
                line[name] = raw[name]
        if kind == "invoice_line_item":
            if not raw.get("invoice_line_item"):
                raise _Invalid("Missing required param: invoice_line_item.",
                               f"{label}[invoice_line_item]")
            line["invoice_line_item"] = raw["invoice_line_item"]
            billed = invoice_lines.get(raw["invoice_line_item"])
            if billed is not None and "amount" not in line:
                line["amount"] = (billed["amount"] * line.get("quantity", 1)
                                  // (billed.get("quantity") or 1))
        lines.append(line)
    fields: dict[str, Any] = {}
    if invoice is not None:
        fields.update({key: invoice[key] for key in ("customer", "currency") if key in invoice})
    if "memo" in params:
        fields["memo"] = params["memo"] or None
    return stripe_credit_note(
        _stripe_id("cn_"), int(time.time()), invoice=invoice_id,
        amount=_integer(params, "amount"), lines=lines or None,
        reason=_reason(params, ("duplicate", "fraudulent", "order_change",
                                "product_unsatisfactory")),
        metadata=_metadata(params), **fields)


_STRIPE_CREATES = {"/v1/refunds": _create_refund, "/v1/credit_notes": _create_credit_note}


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
