"""Stripe: `GET /v1/events` through the `stripe` library (created[gte], 100 a page,
starting_after), the same event objects Stripe delivers. The library retries 5xx and
connection errors; a 429 is retried here after its Retry-After (or a backoff)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import stripe as stripe_sdk

from shared.reconciliation import Fetched, Listing, ReconcileFailed

PAGE = 100
NETWORK_RETRIES = 3
RATE_LIMIT_RETRIES = 5
MAX_WAIT_SECONDS = 60.0


class StripeEvents:
    def __init__(self, api_key: str, api_base: str) -> None:
        self._client = stripe_sdk.StripeClient(
            api_key, base_addresses={"api": api_base}, max_network_retries=NETWORK_RETRIES)

    def listings(self, since: datetime) -> Iterator[Listing]:
        after: str | None = None
        while True:
            params: dict[str, object] = {"created": {"gte": int(since.timestamp())},
                                         "limit": PAGE}
            if after:
                params["starting_after"] = after
            page = self._page(params)
            for event in page.data:
                yield Listing(event_id=event.id, event_type=event.type,
                              created=datetime.fromtimestamp(event.created, UTC),
                              payload=json.dumps(event.to_dict()).encode())
            if not page.has_more or not page.data:
                return
            after = page.data[-1].id

    def fetch(self, listing: Listing) -> Fetched:
        raise AssertionError("Stripe's list carries whole events")

    def _page(self, params: dict[str, object]) -> stripe_sdk.ListObject:  # type: ignore[type-arg]
        for attempt in range(RATE_LIMIT_RETRIES + 1):
            try:
                return self._client.v1.events.list(params=params)  # type: ignore[arg-type]
            except stripe_sdk.RateLimitError as error:
                if attempt == RATE_LIMIT_RETRIES:
                    raise ReconcileFailed(f"Stripe: rate limited: {error}") from None
                time.sleep(_retry_after(error.headers, attempt))
            except stripe_sdk.StripeError as error:
                raise ReconcileFailed(f"Stripe: {type(error).__name__}: {error}") from None
        raise AssertionError("unreachable")


def _retry_after(headers: object, attempt: int) -> float:
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        wait = float(raw) if raw is not None else 0.5 * 2**attempt
    except ValueError:
        wait = 0.5 * 2**attempt
    return min(max(wait, 0.0), MAX_WAIT_SECONDS)
