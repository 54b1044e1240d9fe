"""The ledger's handlers for Stripe, registered through the public handler API, with their
own SQL (the statements below carry the ledger's guarantees; each says why it is safe).

Money is in integer minor units; accounts are per (customer, currency). Every handler
locks the customer's account row first (AccountLock, or LedgerBook's first step), so
transactions that touch the same money queue behind each other instead of deadlocking;
the lock key in webhooks/ledger/hooks.py runs a batch's jobs in that order.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from webhooks import Handler, JobContext, handler
from webhooks.ledger import emails
from webhooks.shared.errors import WebhooksError

# Locks the account row first (ON CONFLICT DO UPDATE takes the row lock), so every
# transaction touching a customer's money takes that customer's lock before anything else.
AccountLock = text("""
    INSERT INTO accounts (customer_id, currency) VALUES (:customer_id, :currency)
    ON CONFLICT (customer_id, currency) DO UPDATE SET updated_at = now()
    RETURNING balance
""")

# The account lock, the entry and the balance in one statement, one round trip, in
# AccountLock's order. `account` locks the account row, or creates it: ON CONFLICT DO UPDATE
# locks the row it conflicts with (waiting for its holder, even for a row committed after
# this statement began), and WHERE false keeps that lock without writing a new version of
# the row, which `moved` could then not update. `entry` reads `account` to its end, so it
# runs after the lock. UNIQUE (entry_key): a business fact (an invoice credit, a refund
# level) is booked once, and `moved` moves the balance only by the entry this very
# statement inserted. `moved` sees the account row only if it was visible when the
# statement began: when booked and not moved (the account is new, or was committed while
# this statement waited for it), AccountMove moves the balance, in the same transaction
# and under the same lock.
LedgerBook = text("""
    WITH account AS (
        INSERT INTO accounts (customer_id, currency) VALUES (:customer_id, :currency)
        ON CONFLICT (customer_id, currency) DO UPDATE SET updated_at = now() WHERE false
        RETURNING 1
    ), entry AS (
        INSERT INTO ledger_entries
            (customer_id, currency, amount, provider, event_id, entry_key, kind, reference)
        SELECT :customer_id, :currency, :amount, :provider, :event_id, :entry_key, :kind,
               :reference
        FROM (SELECT count(*) FROM account) AS locked
        ON CONFLICT (entry_key) DO NOTHING
        RETURNING amount
    ), moved AS (
        UPDATE accounts SET balance = balance + entry.amount, updated_at = now()
        FROM entry
        WHERE customer_id = :customer_id AND currency = :currency
        RETURNING balance
    )
    SELECT EXISTS (SELECT FROM entry) AS booked, EXISTS (SELECT FROM moved) AS moved
""")

# LedgerBook's balance move, for an account its statement could not see; run in the same
# transaction, which holds the account row since LedgerBook.
AccountMove = text("""
    UPDATE accounts SET balance = balance + :amount, updated_at = now()
    WHERE customer_id = :customer_id AND currency = :currency
    RETURNING balance
""")

# Read under the account lock, so two refunds of one charge cannot both see the old total.
LedgerRefundedTotal = text("""
    SELECT coalesce(-sum(amount), 0) FROM ledger_entries
    WHERE kind = 'refund' AND reference = :charge_id
""")

# Applies the event only if it is not older than the last one applied to the subscription.
SubscriptionUpsert = text("""
    INSERT INTO subscriptions
        (subscription_id, customer_id, status, last_event_created, last_event_id)
    VALUES (:subscription_id, :customer_id, :status, :created, :event_id)
    ON CONFLICT (subscription_id) DO UPDATE
        SET customer_id = EXCLUDED.customer_id, status = EXCLUDED.status,
            last_event_created = EXCLUDED.last_event_created,
            last_event_id = EXCLUDED.last_event_id, updated_at = now()
        WHERE subscriptions.last_event_created <= EXCLUDED.last_event_created
    RETURNING subscription_id
""")


class InvalidEvent(WebhooksError):
    """The event lacks a field its effect needs; the job fails (after its attempts)."""


@handler("stripe", "invoice.paid", "invoice.payment_succeeded", "v1.invoice.paid")
def credit_invoice(ctx: JobContext) -> str:
    """Credit amount_paid once per invoice (both event types arrive for one payment, and a
    thin `v1.invoice.paid` of an event destination carries the same invoice: its job
    fetched the invoice, shared/providers/stripe_thin.py). One entry key and one email key
    per invoice, whichever event carries it."""
    invoice = _object(ctx)
    invoice_id = _text(invoice, "id")
    customer, currency = _text(invoice, "customer"), _text(invoice, "currency").lower()
    amount = _amount(invoice, "amount_paid")
    credited = _book(ctx, customer, currency, amount, kind="invoice", reference=invoice_id,
                     entry_key=f"invoice:{invoice_id}")
    address = invoice.get("customer_email")
    if isinstance(address, str) and address:
        content = emails.receipt(invoice_id, amount, currency)
        ctx.queue_email(key=f"receipt:{invoice_id}", kind="receipt", to=address,
                        subject=content.subject, text_body=content.text_body,
                        html_body=content.html_body)
    return "credited" if credited else "already credited"


@handler("stripe", "charge.refunded")
def debit_refund(ctx: JobContext) -> str:
    """Debit so that the total debited for the charge equals its cumulative amount_refunded.
    Refund events may arrive out of order: an older (smaller) total debits nothing. A
    guest charge (`customer: null`) has no account: the job completes with no effect."""
    charge = _object(ctx)
    charge_id = _text(charge, "id")
    if charge.get("customer") is None:
        return "guest charge: no account to debit"
    customer, currency = _text(charge, "customer"), _text(charge, "currency").lower()
    refunded = _amount(charge, "amount_refunded")
    ctx.fetch(AccountLock, {"customer_id": customer, "currency": currency})
    already = ctx.fetch(LedgerRefundedTotal, {"charge_id": charge_id})
    missing = refunded - int(already[0] if already else 0)
    if missing <= 0:
        return "already debited"
    _book(ctx, customer, currency, -missing, kind="refund", reference=charge_id,
          entry_key=f"refund:{charge_id}:{refunded}")
    return "debited"


@handler(
    "stripe",
    "customer.subscription.created",
    "customer.subscription.updated",
    "customer.subscription.deleted",
)
def upsert_subscription(ctx: JobContext) -> str:
    """Apply the subscription's status unless a newer event (by `created`) was applied."""
    subscription = _object(ctx)
    created = ctx.payload.get("created")
    if not isinstance(created, int) or isinstance(created, bool):
        raise InvalidEvent("event has no integer `created`")
    status = "canceled" if ctx.event_type.endswith(".deleted") else _text(subscription, "status")
    applied = ctx.fetch(
        SubscriptionUpsert,
        {"subscription_id": _text(subscription, "id"), "customer_id": _text(subscription,
         "customer"), "status": status, "created": created, "event_id": ctx.event_id},
    )
    return "applied" if applied is not None else "stale, skipped"


@handler("stripe", "invoice.payment_failed")
def notify_payment_failed(ctx: JobContext) -> str:
    invoice = _object(ctx)
    content = emails.payment_failed(
        _text(invoice, "id"), _amount(invoice, "amount_due", default=0),
        str(invoice.get("currency") or "usd"),
    )
    ctx.queue_email(key=f"payment_failed:{ctx.event_id}", kind="payment_failed",
                    to=_text(invoice, "customer_email"), subject=content.subject,
                    text_body=content.text_body, html_body=content.html_body)
    return "notified"


def _book(
    ctx: JobContext, customer: str, currency: str, amount: int, *, kind: str, reference: str,
    entry_key: str,
) -> bool:
    """Lock the account, book the entry once per entry_key and move the balance by it: one
    round trip (LedgerBook), two when the account was new to it (AccountMove). False if the
    entry was booked before."""
    account = {"customer_id": customer, "currency": currency}
    row = ctx.fetch(
        LedgerBook,
        {**account, "amount": amount, "provider": ctx.provider, "event_id": ctx.event_id,
         "entry_key": entry_key, "kind": kind, "reference": reference},
    )
    booked, moved = row or (False, False)
    if booked and not moved and ctx.fetch(AccountMove, {**account, "amount": amount}) is None:
        # Impossible: LedgerBook locked or created the row; refuse to commit if it happens.
        raise RuntimeError(f"account {customer} {currency} vanished under its lock")
    return bool(booked)


def _object(ctx: JobContext) -> dict[str, Any]:
    data = ctx.payload.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    if not isinstance(obj, dict):
        raise InvalidEvent("event has no data.object")
    return obj


def _text(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"data.object.{key} is missing")
    return value


def _amount(obj: dict[str, Any], key: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if value is None and default is not None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidEvent(f"data.object.{key} is not a non-negative integer")
    return value


@handler("stripe", "v2.core.health.event_generation_failure.resolved")
def apply_ungenerated_event(ctx: JobContext) -> str:
    """Stripe could not create an event at all, so no delivery, list or retry will ever
    carry it: its job fetched the object the failure's data.impact names
    (shared/providers/stripe_thin.py), and the handler of the event Stripe failed to
    create applies that object's current state, through the same business keys (a paid
    invoice is credited once, whether or not its own event arrives later)."""
    impact = ctx.payload.get("impact") or {}
    event_type = str(impact.get("event_type") or "")
    apply = UNGENERATED.get(event_type)
    outcome = apply(ctx) if apply is not None else None
    ctx.notify("stripe.event_generation_failed",
               object_id=str(impact.get("related_object_id") or ""), event_type=event_type,
               account=impact.get("account"))
    return f"{event_type}: {outcome or 'no effect'}"


# The ledger's handlers of the events Stripe can fail to generate, by the type an impact
# names: this app's own, whatever other apps handle those types.
UNGENERATED: dict[str, Handler] = {
    event_type: credit_invoice
    for event_type in ("invoice.paid", "invoice.payment_succeeded", "v1.invoice.paid")} | {
    "charge.refunded": debit_refund, "invoice.payment_failed": notify_payment_failed} | {
    f"customer.subscription.{change}": upsert_subscription
    for change in ("created", "updated", "deleted")}
