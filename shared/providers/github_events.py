"""GitHub: for each hook in GITHUB_HOOKS, `GET /<hook>/deliveries` (100 a page, paginated
by the Link header), newest first: the API has no other order, so each page is recorded
as it comes (its deliveries oldest first) and the listing stops at the first delivery
older than the window. A delivery's event id is its `guid`, which every redelivery of it
shares. Only the deliveries whose guid is not recorded are fetched
(`GET /<hook>/deliveries/<id>`): the event type is the request's X-GitHub-Event header
and the payload the request's payload."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from webhooks.shared.providers import http
from webhooks.shared.providers.events_api import Fetched, Listing, ReconcileFailed

PAGE = 100


class GitHubDeliveries:
    def __init__(self, token: str, api_base: str, hooks: tuple[str, ...]) -> None:
        self._api = http.Api(api_base, {"Authorization": f"Bearer {token}",
                                        "Accept": "application/vnd.github+json",
                                        "X-GitHub-Api-Version": "2022-11-28"})
        self._hooks = hooks

    def pages(self, since: datetime) -> Iterator[list[Listing]]:
        for hook in self._hooks:
            yield from self._hook_pages(hook, since)

    def _hook_pages(self, hook: str, since: datetime) -> Iterator[list[Listing]]:
        url: str | None = f"{self._api.base}/{hook}/deliveries"
        params: dict[str, Any] | None = {"per_page": PAGE}
        while url:
            try:
                deliveries, response = self._api.get_json(url, params)
            except http.ApiError as error:
                raise ReconcileFailed(f"GitHub: {error}") from None
            params = None  # the Link URL carries them
            url = response.links.get("next", {}).get("url")
            listings = [_listing(hook, delivery) for delivery in deliveries]
            within = [listing for listing in listings if listing.created >= since]
            yield within
            if len(within) < len(listings):
                return  # newest first: the rest are older still

    def fetch(self, listing: Listing) -> Fetched:
        try:
            body, _ = self._api.get_json(f"{self._api.base}/{listing.ref}")
            request = body["request"]
            headers = {name.lower(): value for name, value in request["headers"].items()}
            payload = request["payload"]
        except http.ApiError as error:
            raise ReconcileFailed(f"GitHub: {error}") from None
        except (KeyError, TypeError, AttributeError):
            raise ReconcileFailed(f"GitHub: delivery {listing.ref} has no request") from None
        event_type = headers.get("x-github-event") or "unknown"
        return Fetched(event_type=event_type, payload=json.dumps(payload).encode())


def _listing(hook: str, delivery: Any) -> Listing:
    try:
        created = datetime.fromisoformat(delivery["delivered_at"].replace("Z", "+00:00"))
        return Listing(event_id=delivery["guid"], created=created,
                       ref=f"{hook}/deliveries/{delivery['id']}")
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ReconcileFailed("GitHub: a delivery without guid, id or delivered_at") from None
