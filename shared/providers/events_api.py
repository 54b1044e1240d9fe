"""What a provider's events API gives reconciliation (shared/reconciliation.py): the events
created since a time, a page (one API answer) of Listings at a time, and a listed event's
payload when the list does not carry it. A provider with an events API builds one for a
source (its record's `events_api`); the clients are its modules' `*_events.py`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from webhooks.shared.errors import WebhooksError


class ReconcileFailed(WebhooksError):
    """The provider's API failed (4xx, 5xx, timeout) or answered something unreadable."""


@dataclass(frozen=True)
class Listing:
    """One event as the provider's list shows it."""

    event_id: str
    created: datetime
    event_type: str | None = None  # known from the list (Stripe, Paddle), or at fetch
    payload: bytes | None = None  # the event's JSON, when the list carries it
    ref: str = ""  # what fetch() needs (GitHub: the delivery's API path)
    account: str | None = None  # Stripe: the connected account it was listed for


@dataclass(frozen=True)
class Fetched:
    event_type: str
    payload: bytes


class EventsAPI(Protocol):
    """A provider's event API, with one source's credentials."""

    def pages(self, since: datetime) -> Iterable[list[Listing]]:
        """The events created since `since`, a page (one API answer) at a time."""
        ...

    def fetch(self, listing: Listing) -> Fetched: ...


@runtime_checkable
class PerAccount(Protocol):
    """A Connect source's API: it lists each connected account's events, for the accounts
    the API lists and those the source's recorded events name (given before pages())."""

    def add_accounts(self, accounts: Iterable[str]) -> None: ...
