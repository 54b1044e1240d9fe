"""FIXED http_receipt: the receipt goes to the outbox, `ctx.queue_email(...)`, in the job's
transaction, under the idempotency key `receipt:<invoice id>`: it commits with the
invoice's row or not at all, a rerun queues it again only if the first run's was rolled
back, and it is sent after the commit, once per key. No connection from the handler.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

import sqlalchemy as sa

from tests.apps.kit._payloads import invoice
from webhooks import JobContext, handler

MIGRATIONS = Path(__file__).parent / "migrations" / "http_receipt_fixed"

metadata = sa.MetaData()
receipts = sa.Table(
    "kit_hrf_receipts", metadata,
    sa.Column("invoice_id", sa.Text, nullable=False),
    sa.Column("customer_id", sa.Text, nullable=False),
    sa.Column("amount_paid", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("invoice_id", name="pk_kit_hrf_receipts"),
)
METADATA = metadata

ReceiptInsert = sa.text("""
    INSERT INTO kit_hrf_receipts (invoice_id, customer_id, amount_paid, currency)
    VALUES (:invoice_id, :customer_id, :amount_paid, :currency)
    ON CONFLICT (invoice_id) DO NOTHING
    RETURNING invoice_id
""")


@handler("stripe", "invoice.paid")
def send_receipt(ctx: JobContext) -> str:
    paid = invoice(ctx)
    first = ctx.fetch(ReceiptInsert, {"invoice_id": paid.id, "customer_id": paid.customer,
                                      "amount_paid": paid.amount_paid,
                                      "currency": paid.currency})
    if first is None or paid.email is None:
        return "no receipt"
    text = (f"We received {paid.amount_paid} {paid.currency.upper()} "
            f"for invoice {paid.id}.")
    queued = ctx.queue_email(key=f"receipt:{paid.id}", kind="receipt", to=paid.email,
                             subject=f"Receipt for invoice {paid.id}", text_body=text + "\n",
                             html_body=f"<p>{escape(text)}</p>")
    return "receipt queued" if queued else "receipt already queued"
