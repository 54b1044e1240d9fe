"""Paddle Billing: `GET /events` (Bearer PADDLE_API_KEY) in ascending id order
(`order_by=id[ASC]`: Paddle's ids grow with time, so oldest first), paginated by
`meta.pagination.next` (a full URL). The list has no time filter: it starts at the oldest
event Paddle keeps, and those older than `since` are skipped. Each item is an event as
Paddle delivers it (`event_id`, `event_type`, `occurred_at`, `data`), recorded as served."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from webhooks.shared.providers import http
from webhooks.shared.providers.events_api import Fetched, Listing, ReconcileFailed

PAGE = 200


class PaddleEvents:
    def __init__(self, api_key: str, api_base: str) -> None:
        self._api = http.Api(api_base, {"Authorization": f"Bearer {api_key}",
                                        "Accept": "application/json"})

    def pages(self, since: datetime) -> Iterator[list[Listing]]:
        url: str | None = f"{self._api.base}/events"
        params: dict[str, Any] | None = {"order_by": "id[ASC]", "per_page": PAGE}
        while url:
            try:
                body, _ = self._api.get_json(url, params)
                events, url = body["data"], body["meta"]["pagination"].get("next")
                if not body["meta"]["pagination"].get("has_more", True):
                    url = None
            except http.ApiError as error:
                raise ReconcileFailed(f"Paddle: {error}") from None
            except (KeyError, TypeError):
                raise ReconcileFailed("Paddle: /events answered without data or meta") from None
            params = None  # the next URL carries them
            listings = [_listing(event) for event in events]
            yield [listing for listing in listings if listing.created >= since]

    def fetch(self, listing: Listing) -> Fetched:
        raise AssertionError("Paddle's list carries whole events")


def _listing(event: dict[str, Any]) -> Listing:
    try:
        created = datetime.fromisoformat(event["occurred_at"].replace("Z", "+00:00"))
        return Listing(event_id=event["event_id"], event_type=event["event_type"],
                       created=created, payload=json.dumps(event).encode())
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ReconcileFailed("Paddle: an event without event_id, event_type or "
                              "occurred_at") from None
