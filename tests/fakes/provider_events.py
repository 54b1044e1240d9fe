"""Events as the providers' APIs serve them, built from their published fixtures
(tests/fixtures/providers, SOURCES.md says where each comes from): the fake provider APIs
serve these, so reconciliation meets what production meets (Stripe's `*_decimal` strings,
nested lists, nulls; Paddle's string amounts; GitHub's delivery records).

Each builder deep-copies a published object and sets only the fields a test names (ids,
times, the customer and amounts the reference handlers read); everything else stays as
published.
"""

from __future__ import annotations

import copy
import functools
import json
from datetime import datetime
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "providers"

# Stripe event type -> the fixture whose data.object is that type's published object.
_STRIPE_OBJECTS = {"invoice": "invoice.paid.json", "charge": "charge.refunded.guest.json",
                   "subscription": "customer.subscription.updated.json",
                   "plan": "plan.created.fixture_event.json"}


@functools.cache
def _load(relative: str) -> Any:
    return json.loads((FIXTURES / relative).read_text())


def published(relative: str) -> Any:
    """A fresh copy of one published fixture file."""
    return copy.deepcopy(_load(relative))


def stripe_object(kind: str, **fields: Any) -> dict[str, Any]:
    """Stripe's published `invoice`, `charge`, `subscription` or `plan`, with `fields` set.
    An invoice's line gets the decimal strings Stripe fills in for a priced line
    (`pricing.unit_amount_decimal`, `quantity_decimal`), from its amount."""
    obj: dict[str, Any] = published(f"stripe/{_STRIPE_OBJECTS[kind]}")["data"]["object"]
    obj.update(fields)
    if kind == "invoice":
        line = obj["lines"]["data"][0]
        amount = obj["amount_paid"] or obj["amount_due"]
        line.update({"amount": amount, "currency": obj["currency"], "invoice": obj["id"],
                     "quantity_decimal": "1"})
        line["pricing"]["unit_amount_decimal"] = str(amount)
        obj["lines"]["url"] = f"/v1/invoices/{obj['id']}/lines"
    return obj


def stripe_account(account_id: str, created: int) -> dict[str, Any]:
    """Stripe's published `account` (stripe/objects/account.json), its id and created set."""
    account: dict[str, Any] = published("stripe/objects/account.json")
    account.update({"id": account_id, "created": created})
    account["external_accounts"]["url"] = f"/v1/accounts/{account_id}/external_accounts"
    return account


def stripe_refund(refund_id: str, created: int, *, charge: str | None = None,
                  payment_intent: str | None = None, amount: int | None = None,
                  reason: str | None = None, metadata: dict[str, str] | None = None,
                  **fields: Any) -> dict[str, Any]:
    """Stripe's published `refund` (stripe/objects/refund.json) as `POST /v1/refunds`
    creates it: `id`, `created`, `charge`, `payment_intent`, `reason` and `metadata` set
    (unset ones null, `{}`), `amount` set when given (else the published 100, the published
    charge's amount), then `fields`."""
    refund: dict[str, Any] = published("stripe/objects/refund.json")
    refund.update({"id": refund_id, "created": created, "charge": charge,
                   "payment_intent": payment_intent, "reason": reason,
                   "metadata": dict(metadata or {})})
    if amount is not None:
        refund["amount"] = amount
    refund.update(fields)
    return refund


def stripe_credit_note(credit_note_id: str, created: int, *, invoice: str,
                       amount: int | None = None, lines: list[dict[str, Any]] | None = None,
                       reason: str | None = None, metadata: dict[str, str] | None = None,
                       **fields: Any) -> dict[str, Any]:
    """Stripe's published `credit_note` (stripe/objects/credit_note.json) as
    `POST /v1/credit_notes` creates it: `id`, `created` (and `effective_at`), `invoice`,
    `reason`, `metadata` set, `lines.url` naming the id, then `fields`.

    `lines` are the request's `lines[i]` (each a dict of `type`, `invoice_line_item`,
    `quantity`, `amount`, `unit_amount`, `description`, `metadata`): each becomes a
    published `credit_note_line_item` of its type (`invoice_line_item` or
    `custom_line_item`), its amount the given `amount`, else `unit_amount` x `quantity`,
    else the published line's. Without `lines` the credit note has none. `amount`,
    `subtotal`, `subtotal_excluding_tax` and `total` are `amount` if given, else the lines'
    sum; the rest stays as published."""
    note: dict[str, Any] = published("stripe/objects/credit_note.json")
    published_lines = {line["type"]: line for line in note["lines"]["data"]}
    made = []
    for n, asked in enumerate(lines or []):
        line = copy.deepcopy(published_lines[asked["type"]])
        quantity = asked.get("quantity", 1)
        unit = asked.get("unit_amount")
        line_amount = asked.get("amount")
        if line_amount is None:
            line_amount = unit * quantity if unit is not None else line["amount"]
        line.update({"id": f"cnli_{credit_note_id.removeprefix('cn_')}{n:02d}",
                     "amount": line_amount, "quantity": quantity})
        if asked["type"] == "invoice_line_item":
            line["invoice_line_item"] = asked["invoice_line_item"]
        else:
            line.update({"unit_amount": unit,
                         "unit_amount_decimal": None if unit is None else str(unit)})
        for key in ("description", "metadata"):
            if key in asked:
                line[key] = asked[key]
        made.append(line)
    total = amount if amount is not None else sum(line["amount"] for line in made)
    note.update({"id": credit_note_id, "created": created, "effective_at": created,
                 "invoice": invoice, "reason": reason, "metadata": dict(metadata or {}),
                 "amount": total, "subtotal": total, "subtotal_excluding_tax": total,
                 "total": total})
    note["lines"].update({"data": made, "has_more": False,
                          "url": f"/v1/credit_notes/{credit_note_id}/lines"})
    note.update(fields)
    return note


def stripe_event(event_type: str, obj: dict[str, Any], *, event_id: str,
                 created: int) -> dict[str, Any]:
    """Stripe's published Event envelope (same keys, same order) around `obj`."""
    event: dict[str, Any] = published(f"stripe/{_STRIPE_OBJECTS['plan']}")
    event.update({"id": event_id, "type": event_type, "created": created,
                  "data": {"object": obj}})
    return event


def dress_stripe(event: dict[str, Any]) -> dict[str, Any]:
    """A hand-written Stripe event (tests/acceptance/world.py's) as the API would serve it:
    its fields laid over the published object of its `object` type and the published
    envelope. The fields the handlers read keep the values given."""
    obj = event["data"]["object"]
    kind = obj.get("object", "invoice")
    dressed = stripe_object(kind, **obj) if kind in _STRIPE_OBJECTS else dict(obj)
    return stripe_event(event["type"], dressed, event_id=event["id"], created=event["created"])


def paddle_event(n: int, occurred_at: datetime, *, event_id: str) -> dict[str, Any]:
    """The n-th (cycling) event of Paddle's published `GET /events` response (the Python
    SDK's list_default.json), with its id and time set."""
    events = _load("paddle/events.list_default.json")["data"]
    event: dict[str, Any] = copy.deepcopy(events[n % len(events)])
    event.update({"event_id": event_id,
                  "occurred_at": occurred_at.isoformat().replace("+00:00", "Z")})
    return event


def github_delivery(delivery_id: int, guid: str, delivered_at: datetime, *,
                    event: str = "push", redelivery: bool = False,
                    payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """GitHub's published delivery (`GET /<hook>/deliveries/<id>`, the REST API
    description's `hook-delivery` example) carrying octokit's published push payload."""
    delivery: dict[str, Any] = published("github/hook-delivery.json")
    when = delivered_at.isoformat(timespec="seconds").replace("+00:00", "Z")
    delivery.update({"id": delivery_id, "guid": guid, "delivered_at": when,
                     "redelivery": redelivery, "event": event,
                     "action": None if event == "push" else delivery["action"]})
    delivery["request"]["headers"].update({"X-GitHub-Delivery": guid, "X-GitHub-Event": event})
    delivery["request"]["payload"] = (payload if payload is not None
                                      else published("github/push.payload.json"))
    return delivery


def github_push(before: str) -> dict[str, Any]:
    """octokit's published push payload (a branch deleted at commit `before`)."""
    payload: dict[str, Any] = published("github/push.payload.json")
    payload["before"] = before
    return payload


def github_delivery_item(delivery: dict[str, Any]) -> dict[str, Any]:
    """The delivery as `GET /<hook>/deliveries` lists it: the published `hook-delivery-items`
    shape (no url, request or response)."""
    item: dict[str, Any] = copy.deepcopy(_load("github/hook-delivery-items.json")[0])
    item.update({key: delivery[key] for key in item if key in delivery})
    return item


# Stripe's v2 event objects are ISO 8601 times to the millisecond, in UTC.
def stripe_v2_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def stripe_thin_event(event_type: str, related: dict[str, Any] | None, *, event_id: str,
                      created: datetime, context: str | None = None,
                      data: dict[str, Any] | None = None) -> dict[str, Any]:
    """Stripe's published thin event (stripe-python's v2 event test, same keys in the same
    order) for `related` (an object: its id, its type, its URL), in `context` (a connected
    account, or none). With `data` it is the full event `GET /v2/core/events/<id>` serves;
    the thin payload a destination sends is the same without `data`."""
    event: dict[str, Any] = published("stripe/thin/v2.core.event.json")
    event.update({"id": event_id, "type": event_type, "created": stripe_v2_time(created),
                  "context": context, "livemode": False})
    if related is None:
        del event["related_object"]
    else:
        kind = str(related["object"])
        event["related_object"] = {"id": related["id"], "type": kind,
                                   "url": f"/v1/{kind}s/{related['id']}"}
    if data is not None:
        event["data"] = data
    return event


def thin_payload(full: dict[str, Any]) -> dict[str, Any]:
    """What an event destination POSTs for a full v2 event: all of it but `data`."""
    return {key: value for key, value in full.items() if key != "data"}
