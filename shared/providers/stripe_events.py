"""Stripe: `GET /v1/events` through the `stripe` library, the same event objects Stripe
delivers, paged forward in time from the window's start.

Stripe lists newest first; `ending_before=ID` answers the page of events just newer than
ID, so paging with it from an event older than the window walks the window oldest first.
That anchor is the newest event created before the window (`created[lt]`, one request).
When Stripe has none (the window reaches back past the oldest event Stripe keeps), the
window is paged newest first with `starting_after` instead: every page is still recorded
as it arrives.

The payload recorded is each event's JSON as the response carried it: the list is read
with the library's `raw_request` (its authentication, retries and errors), not turned
into the library's objects, which make `*_decimal` strings Decimals (not what Stripe
sent) and cost more than the JSON itself. The library retries 5xx and connection errors;
a 429 is retried here after its Retry-After (or a backoff). Every request waits for its
token of the process's one Stripe budget first (shared/providers/stripe_budget.py).

A Connect source (ConnectEvents) lists the events of each connected account with its
`Stripe-Account` header, each account its own walk (anchor and cursor) over the window:
the accounts its recorded events name and those `GET /v1/accounts` lists. The platform's
own events (no header) are not a Connect source's: its own source reconciles them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import stripe as stripe_sdk

from webhooks.shared.providers import stripe_budget
from webhooks.shared.providers.events_api import Fetched, Listing, ReconcileFailed

PAGE = 100
NETWORK_RETRIES = 3
RATE_LIMIT_RETRIES = 5
MAX_WAIT_SECONDS = 60.0


def _client(api_key: str, api_base: str) -> stripe_sdk.StripeClient:
    return stripe_sdk.StripeClient(
        api_key, base_addresses={"api": api_base}, max_network_retries=NETWORK_RETRIES,
        http_client=stripe_budget.http_client())


class StripeEvents:
    """`GET /v1/events` of the key's account, or of the connected `account`."""

    def __init__(self, api_key: str, api_base: str, account: str | None = None,
                 client: stripe_sdk.StripeClient | None = None) -> None:
        self._client = client or _client(api_key, api_base)
        self.account = account

    def pages(self, since: datetime) -> Iterator[list[Listing]]:
        start = int(since.timestamp())
        anchor = self._anchor(start)
        forward = anchor is not None
        cursor = anchor
        while True:
            params: dict[str, Any] = {"created": {"gte": start}, "limit": PAGE}
            if cursor is not None:
                params["ending_before" if forward else "starting_after"] = cursor
            events, has_more = self._page(params)
            if forward:
                events.reverse()  # a page is newest first; forward, it is read oldest first
            listings = [_listing(event, self.account) for event in events]
            yield [item for item in listings if item.created >= since]
            if not has_more or not events:
                return
            following = events[-1]["id"]
            if following == cursor:
                raise ReconcileFailed("Stripe: the event list did not advance past "
                                      f"{cursor}")
            cursor = following

    def fetch(self, listing: Listing) -> Fetched:
        raise AssertionError("Stripe's list carries whole events")

    def _anchor(self, start: int) -> str | None:
        """The newest event created before the window, or None."""
        events, _ = self._page({"created": {"lt": start}, "limit": 1})
        if events and isinstance(events[0].get("created"), int) and events[0]["created"] < start:
            return str(events[0]["id"])
        return None

    def _page(self, params: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
        """One list request: its events as the response's JSON carried them, and has_more."""
        return _list(self._client, "/v1/events", params, self.account)


class ConnectEvents:
    """A Connect source: `GET /v1/events` of each connected account (`Stripe-Account`),
    one account after another, each its own walk over the window; the accounts are those
    `GET /v1/accounts` lists (paginated) and those added (the source's recorded events
    name them), each once, in order."""

    def __init__(self, api_key: str, api_base: str) -> None:
        self._client = _client(api_key, api_base)
        self._named: list[str] = []

    def add_accounts(self, accounts: Any) -> None:
        self._named.extend(accounts)

    def pages(self, since: datetime) -> Iterator[list[Listing]]:
        for account in dict.fromkeys([*self._named, *self.accounts()]):
            yield from StripeEvents("", "", account, self._client).pages(since)

    def accounts(self) -> Iterator[str]:
        """The connected accounts `GET /v1/accounts` lists, page after page."""
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": PAGE}
            if cursor is not None:
                params["starting_after"] = cursor
            accounts, has_more = _list(self._client, "/v1/accounts", params, None)
            yield from (str(account["id"]) for account in accounts if account.get("id"))
            if not has_more or not accounts or accounts[-1].get("id") == cursor:
                return
            cursor = str(accounts[-1]["id"])

    def fetch(self, listing: Listing) -> Fetched:
        raise AssertionError("Stripe's list carries whole events")


def _list(client: stripe_sdk.StripeClient, path: str, params: dict[str, Any],
          account: str | None) -> tuple[list[dict[str, Any]], bool]:
    """One v1 list request (of `account`'s, with Stripe-Account): its objects as the
    response's JSON carried them, and has_more."""
    return _served(_get(client, path, stripe_account=account, **params), path)


def _get(client: stripe_sdk.StripeClient, path: str, **params: Any) -> Any:
    """One GET through the library. A 429 waits its Retry-After (or a backoff) before the
    next try, RATE_LIMIT_RETRIES times at most: never hammered. Any other error of Stripe's
    fails the run (ReconcileFailed): the next run starts again from the last success."""
    for attempt in range(RATE_LIMIT_RETRIES + 1):
        try:
            return client.raw_request("get", path, **params)
        except stripe_sdk.RateLimitError as error:
            if attempt == RATE_LIMIT_RETRIES:
                raise ReconcileFailed(f"Stripe: rate limited: {error}") from None
            time.sleep(_retry_after(error.headers, attempt))
        except stripe_sdk.StripeError as error:
            raise ReconcileFailed(f"Stripe: {type(error).__name__}: {error}") from None
    raise AssertionError("unreachable")


def _served(response: Any, path: str) -> tuple[list[dict[str, Any]], bool]:
    try:
        events, has_more = response.data["data"], response.data.get("has_more", False)
    except (AttributeError, KeyError, TypeError):
        raise ReconcileFailed(f"Stripe: {path} answered without a list") from None
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ReconcileFailed(f"Stripe: {path} answered without a list")
    return events, bool(has_more)


def _listing(event: dict[str, Any], account: str | None = None) -> Listing:
    try:
        return Listing(event_id=str(event["id"]), event_type=str(event["type"]),
                       created=datetime.fromtimestamp(int(event["created"]), UTC),
                       payload=json.dumps(event).encode(), account=account)
    except (KeyError, TypeError, ValueError, OverflowError):
        raise ReconcileFailed("Stripe: an event without id, type or created") from None


def _retry_after(headers: object, attempt: int) -> float:
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        wait = float(raw) if raw is not None else 0.5 * 2**attempt
    except ValueError:
        wait = 0.5 * 2**attempt
    return min(max(wait, 0.0), MAX_WAIT_SECONDS)


class StripeThinEvents:
    """A thin source (an event destination): `GET /v2/core/events` through the library,
    `created[gte]` the window's start, paged by the v2 API's `next_page_url` (which carries
    its own query). Each listed event is recorded as a delivery of it would be (its thin
    JSON as served; the job fetches the rest, shared/providers/stripe_thin.py). A page
    link to another host is refused: the key goes to the API base only."""

    def __init__(self, api_key: str, api_base: str) -> None:
        self._client = _client(api_key, api_base)

    def pages(self, since: datetime) -> Iterator[list[Listing]]:
        url: str | None = "/v2/core/events"
        params: dict[str, Any] = {"created": {"gte": _iso(since)}, "limit": PAGE}
        while url is not None:
            if not url.startswith("/v2/core/events"):
                raise ReconcileFailed(f"Stripe: refused a page link elsewhere: {url[:100]}")
            body = self._page(url, params)
            yield [_thin_listing(event) for event in body["data"]]
            url, params = body.get("next_page_url") or None, {}

    def fetch(self, listing: Listing) -> Fetched:
        raise AssertionError("Stripe's list carries whole events")

    def _page(self, url: str, params: dict[str, Any]) -> dict[str, Any]:
        body = json.loads(_get(self._client, url, **params).body)
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            raise ReconcileFailed("Stripe: /v2/core/events answered without a list")
        return body


def thin_events(api_key: str, api_base: str) -> StripeThinEvents:
    """The events API (EventsAPI) of a thin Stripe source, with that source's API key."""
    return StripeThinEvents(api_key, api_base)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _thin_listing(event: Any) -> Listing:
    try:
        created = datetime.fromisoformat(str(event["created"]).replace("Z", "+00:00"))
        return Listing(event_id=str(event["id"]), event_type=str(event["type"]),
                       created=created, payload=json.dumps(event).encode())
    except (KeyError, TypeError, ValueError):
        raise ReconcileFailed("Stripe: a v2 event without id, type or created") from None
