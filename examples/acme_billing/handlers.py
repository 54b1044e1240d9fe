"""Acme's handler: record each paid Stripe invoice once and thank its customer once.

It runs in the job's transaction (`ctx`): its row and its email commit with the job's
`done` mark, or not at all. Idempotent by business key, so duplicates, retries and the
invoice's second event type do nothing more: the invoice id is the row's primary key and
in the email's idempotency key.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from webhooks import JobContext, PermanentJobError, handler

from . import emails
from .hooks import INVOICE_TYPES, PROVIDER, data_object

# One row per invoice, whichever of its events comes first: a second insert of the key
# does nothing (waiting, if another transaction inserted it and is still open, for its
# outcome), and RETURNING says whether this job was the first.
RecordPaidInvoice = sa.text("""
    INSERT INTO acme_paid_invoices (invoice_id, customer_id, amount_paid, currency, event_id)
    VALUES (:invoice_id, :customer_id, :amount_paid, :currency, :event_id)
    ON CONFLICT (invoice_id) DO NOTHING
    RETURNING invoice_id
""")


@dataclass(frozen=True)
class PaidInvoice:
    id: str
    customer: str
    amount_paid: int
    currency: str
    email: str | None


def paid_invoice(payload: dict[str, object]) -> PaidInvoice:
    """The invoice of the event; PermanentJobError when a field is missing (another
    attempt would find it missing too: the job fails at once)."""
    obj = data_object(payload)
    if obj is None:
        raise PermanentJobError("event has no data.object")
    invoice_id, customer, currency = obj.get("id"), obj.get("customer"), obj.get("currency")
    amount, email = obj.get("amount_paid"), obj.get("customer_email")
    if not (isinstance(invoice_id, str) and isinstance(customer, str)
            and isinstance(currency, str)):
        raise PermanentJobError("data.object needs an id, a customer and a currency")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount < 0:
        raise PermanentJobError("data.object.amount_paid is not a non-negative integer")
    return PaidInvoice(invoice_id, customer, amount, currency.lower(),
                       email if isinstance(email, str) and email else None)


@handler(PROVIDER, *INVOICE_TYPES)
def record_paid_invoice(ctx: JobContext) -> str:
    invoice = paid_invoice(ctx.payload)
    first = ctx.fetch(RecordPaidInvoice, {
        "invoice_id": invoice.id, "customer_id": invoice.customer,
        "amount_paid": invoice.amount_paid, "currency": invoice.currency,
        "event_id": ctx.event_id})
    if first is None:
        return "already recorded"
    if invoice.email is not None:
        content = emails.thanks(invoice.id, invoice.amount_paid, invoice.currency)
        ctx.queue_email(key=f"acme_thanks:{invoice.id}", kind="acme_thanks", to=invoice.email,
                        subject=content.subject, text_body=content.text_body,
                        html_body=content.html_body)
    return "recorded"
