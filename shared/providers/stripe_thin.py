"""Stripe thin events: fetch what a thin event announces before its handler runs (the
Stripe record's before_handler, shared/providers/stripe.py, calls fetch).

A thin event (`"object": "v2.core.event"`, from an event destination) carries only the
event's id, type, `context` (the connected account, or none) and a reference to its
related object: nothing to apply. Guarantee: its job applies nothing from the thin payload
alone. Each attempt fetches, through the `stripe` library with the source's API key and,
at a Connect source only, the event's `context` (sent as `Stripe-Context`), the full event
(`GET /v2/core/events/<id>`, the id percent-encoded as one path segment) and its related
object (its `url`), and the handler then
applies the fetched object, so it applies Stripe's current state of the object. A failed
fetch (a 5xx, a 429, a timeout, a connection error) raises ThinFetchFailed: the attempt
fails, its error goes to the job's last_error, and the job's backoff is the retry.

Where the fetch runs: inside the job's transaction, after the claim. The batch claims its
jobs, and with them their row locks, in the transaction that commits their effects
(webhooks.worker.jobs), so no fetch can come before the claim without a second claim or a lease.
The transaction is idle while a request is in flight, and the server ends a transaction
idle for longer than shared/db.py SERVER_SETTINGS' idle_in_transaction_session_timeout; so
every request is bounded by FETCH_TIMEOUT_SECONDS and the library retries nothing
(`max_network_retries=0`: the job's backoff is the only retry), and a job makes at most
MAX_FETCHES requests in a row: their sum stays well below that timeout.

What the handler sees: the snapshot event's shape (`id`, `type`, `created`, `livemode`,
`account`, `data.object` the fetched object), so one handler serves a snapshot
`invoice.paid` and a thin `v1.invoice.paid` alike, through the same business keys. The
JSON is kept as Stripe served it (`raw_request`, not the library's objects, which turn
`*_decimal` strings into Decimals).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from webhooks.shared.errors import PermanentJobError
from webhooks.shared.providers.base import NotReady

if TYPE_CHECKING:
    import stripe as stripe_sdk

THIN_OBJECT = "v2.core.event"
GENERATION_FAILURE_RESOLVED = "v2.core.health.event_generation_failure.resolved"
FETCH_TIMEOUT_SECONDS = 4.0
MAX_FETCHES = 3  # the event, its related object, the object an impact names
# The v1 objects a failed event generation can name (data.impact.event_type's prefix),
# by their retrieve path: Stripe's impact names the object by id, not by URL.
IMPACT_OBJECT_PATHS = {"invoice": "/v1/invoices/"}


class ThinFetchFailed(NotReady):
    """Stripe did not answer a thin event's fetch (5xx, 429, timeout, connection)."""


def is_thin(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("object") == THIN_OBJECT


def fetch(api_key: str, api_base: str, thin: dict[str, Any],
          context: str | None) -> dict[str, Any]:
    """The event the handler applies: the full event and its related object, fetched with
    the source's key, in the connected account `context` (None: the platform's)."""
    client = _client(api_key, api_base, FETCH_TIMEOUT_SECONDS)
    event = _get(client, f"/v2/core/events/{_segment(_id(thin))}", context, thin)
    related = event.get("related_object") or thin.get("related_object")
    if event.get("type") == GENERATION_FAILURE_RESOLVED:
        return _impact(client, event, thin)
    if not isinstance(related, dict) or not related.get("url"):
        return _as_snapshot(event, context, None)
    url = str(related["url"])
    if not url.startswith(("/v1/", "/v2/")):  # a path of the API base, never another host
        raise PermanentJobError(f"event {_id(thin)}: related object at {url[:100]!r}")
    return _as_snapshot(event, context, _get(client, url, context, thin))


def _impact(client: stripe_sdk.StripeClient, event: dict[str, Any],
            thin: dict[str, Any]) -> dict[str, Any]:
    """A resolved event-generation failure: the object its data.impact names, fetched in
    the impact's account, with the impact kept for the handler (which event it stands for)."""
    impact = (event.get("data") or {}).get("impact") or {}
    kind = str(impact.get("event_type") or "").split(".")[0]
    path = IMPACT_OBJECT_PATHS.get(kind)
    if path is None or not impact.get("related_object_id"):
        raise PermanentJobError(f"event {_id(thin)}: no object to fetch in its impact")
    account = impact.get("account") or event.get("context") or None
    obj = _get(client, f"{path}{impact['related_object_id']}", account, thin)
    snapshot = _as_snapshot(event, account, obj)
    snapshot["impact"] = impact
    return snapshot


def _as_snapshot(event: dict[str, Any], account: str | None,
                 obj: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": event.get("id"), "object": "event", "type": event.get("type"),
            "created": event.get("created"), "livemode": event.get("livemode"),
            "account": account, "data": {"object": obj}, "thin": event}


def _get(client: stripe_sdk.StripeClient, url: str, context: str | None,
         thin: dict[str, Any]) -> dict[str, Any]:
    import stripe as stripe_sdk

    try:
        response = client.raw_request("get", url, stripe_context=context,
                                      headers={"Stripe-Request-Trigger": f"event={_id(thin)}"})
    except stripe_sdk.StripeError as error:
        raise ThinFetchFailed(f"GET {url}: {type(error).__name__}: {error}") from None
    body = json.loads(response.body)
    if not isinstance(body, dict):
        raise ThinFetchFailed(f"GET {url}: not a JSON object")
    return body


def _id(thin: dict[str, Any]) -> str:
    return str(thin.get("id"))


def _segment(event_id: str) -> str:
    """The id as one path segment: percent-encoded whole (`/`, `?`, `#`, `%` included), so
    no part of it is read as a path, a query or a fragment. An id that is a dot segment
    (`.`, `..`), which encoding leaves as it is and a URL resolves, is refused."""
    if event_id in (".", ".."):
        raise PermanentJobError(f"event id {event_id!r} cannot be fetched: not an id")
    return quote(event_id, safe="")


def _client(api_key: str, api_base: str, timeout: float) -> stripe_sdk.StripeClient:
    """The process's client for the key and base (shared/providers/stripe_budget.py)."""
    from webhooks.shared.providers import stripe_budget  # the library: a slow import

    return stripe_budget.client(api_key, api_base, timeout)
