"""Events as providers send them, and the effects they must have had: each logical event
applied once, computed here from the reference business rules (each invoice credited once,
refunds up to the charge's amount_refunded, the newest subscription state, one email per
key), independently of the code.

Light on purpose (standard library only): sender processes import it.
"""

from __future__ import annotations

import functools
import json
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

CURRENCIES = ("usd", "eur", "jpy")


@dataclass(frozen=True)
class Event:
    provider: str
    event_id: str
    event_type: str
    body: bytes
    source: str | None = None  # a named source, at /webhooks/<provider>/<source>
    secret: str | None = None  # its secret; None: the provider's (signing.SECRETS)

    @property
    def key(self) -> tuple[str, str]:
        return (self.provider, self.event_id)

    @property
    def path(self) -> str:
        """Where it is delivered: its source's URL path."""
        return f"/webhooks/{self.provider}" + (f"/{self.source}" if self.source else "")


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


@dataclass
class World:
    """A set of events and their expected end state."""

    rng: random.Random = field(default_factory=random.Random)
    events: list[Event] = field(default_factory=list)
    balances: Counter[tuple[str, str]] = field(default_factory=Counter)
    # invoice id -> (customer, currency, amount); the events that may credit it
    invoices: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    invoice_of_event: dict[str, str] = field(default_factory=dict)
    # charge id -> the highest cumulative amount_refunded among its events
    refunds: dict[str, int] = field(default_factory=dict)
    charge_of_event: dict[str, str] = field(default_factory=dict)
    subscriptions: dict[str, str] = field(default_factory=dict)
    emails: dict[str, str] = field(default_factory=dict)  # idempotency key -> recipient
    slow_credits: set[str] = field(default_factory=set)  # test.slow_credit's event ids
    customers: list[str] = field(default_factory=list)
    _clock: int = 1_700_000_000

    # --- building ---------------------------------------------------------------------

    def customer(self) -> str:
        if len(self.customers) < 25 and (not self.customers or self.rng.random() < 0.3):
            self.customers.append(_id("cus"))
        return self.rng.choice(self.customers)

    def _stripe(self, event_type: str, obj: dict[str, object],
                created: int | None = None) -> Event:
        self._clock += 1
        event_id = _id("evt")
        body = {"id": event_id, "object": "event", "type": event_type,
                "created": created if created is not None else self._clock,
                "data": {"object": obj}}
        event = Event("stripe", event_id, event_type, json.dumps(body).encode())
        self.events.append(event)
        return event

    def invoice(self, *, both_types: bool = True, email: bool = True) -> list[Event]:
        """One paid invoice; Stripe sends invoice.paid and invoice.payment_succeeded for
        it (two event ids): credited once, one receipt."""
        customer, currency = self.customer(), self.rng.choice(CURRENCIES)
        invoice_id, amount = _id("in"), self.rng.randint(1, 500_000)
        address = f"{customer}@example.com" if email else None
        obj = {"id": invoice_id, "object": "invoice", "customer": customer,
               "amount_paid": amount, "amount_due": amount, "currency": currency,
               "customer_email": address}
        types = ["invoice.paid", "invoice.payment_succeeded"]
        self.rng.shuffle(types)
        events = [self._stripe(t, obj) for t in types[: 2 if both_types else 1]]
        self.invoices[invoice_id] = (customer, currency, amount)
        for event in events:
            self.invoice_of_event[event.event_id] = invoice_id
        self.balances[(customer, currency)] += amount
        if address:
            self.emails[f"receipt:{invoice_id}"] = address
        return events

    def refunds_of_charge(self, steps: int = 3) -> list[Event]:
        """Partial refunds of one charge, each event carrying the cumulative total."""
        customer, currency = self.customer(), self.rng.choice(CURRENCIES)
        charge_id = _id("ch")
        totals = sorted(self.rng.sample(range(1, 100_000), steps))
        events = [self._stripe("charge.refunded", {"id": charge_id, "object": "charge",
                                                   "customer": customer, "currency": currency,
                                                   "amount_refunded": total})
                  for total in totals]
        self.refunds[charge_id] = totals[-1]
        for event in events:
            self.charge_of_event[event.event_id] = charge_id
        self.balances[(customer, currency)] -= totals[-1]
        return events

    def subscription_history(self) -> list[Event]:
        """created, some updates, maybe deleted: the latest (by `created`) wins whatever
        the arrival order."""
        customer, sub_id = self.customer(), _id("sub")
        statuses = ["trialing", *self.rng.choices(["active", "past_due", "unpaid"], k=2)]
        types = ["customer.subscription.created"] + ["customer.subscription.updated"] * 2
        if self.rng.random() < 0.4:
            statuses.append("canceled")
            types.append("customer.subscription.deleted")
        events = [self._stripe(t, {"id": sub_id, "object": "subscription",
                                   "customer": customer, "status": s})
                  for t, s in zip(types, statuses, strict=True)]
        self.subscriptions[sub_id] = statuses[-1]
        return events

    def payment_failed(self) -> list[Event]:
        customer = self.customer()
        obj = {"id": _id("in"), "object": "invoice", "customer": customer,
               "amount_due": self.rng.randint(1, 10_000), "currency": "usd",
               "customer_email": f"{customer}@example.com"}
        event = self._stripe("invoice.payment_failed", obj)
        self.emails[f"payment_failed:{event.event_id}"] = f"{customer}@example.com"
        return [event]

    def slow_credit(self) -> list[Event]:
        """tests/handlers_for_tests.py's event: +100 usd with no business key, then the
        transaction held open for TEST_HANDLER_SLEEP. Only the job's own exactly-once
        stands between it and a double credit: a second run would show in the balance."""
        customer = self.customer()
        event = self._stripe("test.slow_credit", {"customer": customer})
        self.balances[(customer, "usd")] += 100
        self.slow_credits.add(event.event_id)
        return [event]

    def unhandled_stripe(self) -> list[Event]:
        return [self._stripe("customer.updated", {"id": self.customer(), "object": "customer"})]

    def other_provider(self, provider: str) -> list[Event]:
        """An event of another provider: recorded and completed, with no effect."""
        event_id = str(uuid.uuid4())
        body: dict[str, object]
        if provider == "paddle":
            event_type = "transaction.completed"
            body = {"event_id": "evt_" + event_id, "event_type": event_type, "data": {}}
            event_id = str(body["event_id"])
        elif provider == "slack":
            event_type = "app_mention"
            body = {"type": "event_callback", "event_id": "Ev" + event_id,
                    "event": {"type": event_type, "text": "hi"}}
            event_id = str(body["event_id"])
        elif provider == "shopify":
            event_type, body = "orders/create", {"id": self.rng.randint(1, 10**12)}
        elif provider == "github":  # a push names its commit: no two bodies are the same
            event_type = "push"
            body = {"ref": "refs/heads/main", "after": uuid.uuid4().hex + "00000000"}
        else:
            event_type, event_id = "email.sent", "msg_" + event_id
            body = {"type": event_type, "data": {"id": event_id}}
        event = Event(provider, event_id, event_type, json.dumps(body).encode())
        self.events.append(event)
        return [event]

    def mixed(self, count: int) -> None:
        """About `count` events of every kind, in the proportions of a billing system."""
        makers: list[tuple[Callable[[], list[Event]], int]] = [
            (self.invoice, 40), (lambda: self.invoice(both_types=False), 6),
            (lambda: self.invoice(email=False), 6), (self.refunds_of_charge, 6),
            (self.subscription_history, 6), (self.payment_failed, 8),
            (self.unhandled_stripe, 4)]
        makers += [(functools.partial(self.other_provider, p), 4)
                   for p in ("paddle", "shopify", "github", "slack", "standard")]
        functions, weights = zip(*makers, strict=True)
        while len(self.events) < count:
            self.rng.choices(functions, weights)[0]()

    # --- delivering -------------------------------------------------------------------

    def deliveries(self, events: list[Event] | None = None, low: int = 1,
                   high: int = 5) -> list[Event]:
        """Each event `low` to `high` times, all in random order (duplicates included)."""
        out = [event for event in (events if events is not None else self.events)
               for _ in range(self.rng.randint(low, high))]
        self.rng.shuffle(out)
        return out

    @property
    def keys(self) -> set[tuple[str, str]]:
        return {event.key for event in self.events}
