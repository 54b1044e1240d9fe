"""What the kit's apps read of a Stripe event (shared by them; registers nothing, so it
belongs to no app): the invoice or subscription of data.object, or PermanentJobError when
a field is missing (another attempt would find it missing too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhooks import JobContext, PermanentJobError

INVOICE_TYPES = ("invoice.paid", "invoice.payment_succeeded")  # one payment sends both
SUBSCRIPTION_TYPES = tuple(f"customer.subscription.{change}"
                           for change in ("created", "updated", "deleted"))


@dataclass(frozen=True)
class Invoice:
    id: str
    customer: str
    amount_paid: int
    currency: str
    email: str | None


@dataclass(frozen=True)
class Subscription:
    id: str
    customer: str
    status: str
    created: int  # the event's `created`, not the subscription's


def data_object(ctx: JobContext) -> dict[str, Any]:
    data = ctx.payload.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    if not isinstance(obj, dict):
        raise PermanentJobError("event has no data.object")
    return obj


def _text(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise PermanentJobError(f"data.object.{key} is missing")
    return value


def _count(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PermanentJobError(f"{name} is not a non-negative integer")
    return value


def invoice(ctx: JobContext) -> Invoice:
    obj = data_object(ctx)
    email = obj.get("customer_email")
    return Invoice(_text(obj, "id"), _text(obj, "customer"),
                   _count(obj.get("amount_paid"), "data.object.amount_paid"),
                   _text(obj, "currency").lower(),
                   email if isinstance(email, str) and email else None)


def subscription(ctx: JobContext) -> Subscription:
    obj = data_object(ctx)
    return Subscription(_text(obj, "id"), _text(obj, "customer"), _text(obj, "status"),
                        _count(ctx.payload.get("created"), "the event's created"))
