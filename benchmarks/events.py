"""Signed, unique Stripe invoice events, as a provider would deliver them."""

from __future__ import annotations

import hashlib
import hmac
import time

CUSTOMERS = 1000  # invoices spread over this many accounts, as in ingest.sql


def invoice_body(event_id: str, n: int) -> bytes:
    """A Stripe `invoice.paid` event (the same shape and size as ingest.sql's payload)."""
    return (
        f'{{"id": "{event_id}", "object": "event", "type": "invoice.paid", '
        f'"created": {int(time.time())}, "data": {{"object": {{"id": "in_{event_id[4:]}", '
        f'"object": "invoice", "customer": "cus_{n % CUSTOMERS}", "amount_paid": 1999, '
        f'"amount_due": 1999, "currency": "usd", "customer_email": "buyer@example.com"}}}}}}'
    ).encode()


def thin_body(event_id: str) -> bytes:
    """A Stripe thin `v1.invoice.paid` (an event destination's delivery, Stripe's shape)."""
    created = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    invoice = f"in_{event_id[4:]}"
    return (
        f'{{"id": "{event_id}", "object": "v2.core.event", "type": "v1.invoice.paid", '
        f'"livemode": false, "created": "{created}", "context": null, '
        f'"related_object": {{"id": "{invoice}", "type": "invoice", '
        f'"url": "/v1/invoices/{invoice}"}}, "reason": null}}'
    ).encode()


def stripe_signature(body: bytes, secret: str, now: float | None = None) -> str:
    """`Stripe-Signature` per Stripe's documented scheme."""
    timestamp = int(time.time() if now is None else now)
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def signed_delivery(prefix: str, n: int, secret: str,
                    thin: bool = False) -> tuple[str, bytes, dict[str, str]]:
    """(event id, body, headers) of the n-th unique event of a run (thin: a thin event)."""
    event_id = f"evt_{prefix}_{n}"
    body = thin_body(event_id) if thin else invoice_body(event_id, n)
    headers = {"Content-Type": "application/json",
               "Stripe-Signature": stripe_signature(body, secret)}
    return event_id, body, headers
