"""WRONG: a receipt sent by HTTP from inside the handler. On `invoice.paid` it records the
invoice (one row per invoice) and, the first time, POSTs the receipt to a mail service
(`http://127.0.0.1:9/email`, 1 s timeout, nothing caught). A handler runs in the job's
transaction and may run again before that commits (a neighbour's failure reruns the batch,
a crash after the POST, a failed attempt): the POST cannot be rolled back, so the customer
gets the receipt again; and a slow service holds the batch's transaction open. The kit
fails it for opening a network connection at all (it blocks the connection before it is
made; without the kit, nothing listens on port 9 and every attempt fails). Fixed:
http_receipt_fixed.py.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import sqlalchemy as sa

from tests.apps.kit._payloads import invoice
from webhooks import JobContext, handler

MIGRATIONS = Path(__file__).parent / "migrations" / "http_receipt"
MAIL_SERVICE = "http://127.0.0.1:9/email"  # port 9: discard

metadata = sa.MetaData()
receipts = sa.Table(
    "kit_hr_receipts", metadata,
    sa.Column("invoice_id", sa.Text, nullable=False),
    sa.Column("customer_id", sa.Text, nullable=False),
    sa.Column("amount_paid", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("invoice_id", name="pk_kit_hr_receipts"),
)
METADATA = metadata

ReceiptInsert = sa.text("""
    INSERT INTO kit_hr_receipts (invoice_id, customer_id, amount_paid, currency)
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
    body = json.dumps({"to": paid.email, "subject": f"Receipt for invoice {paid.id}",
                       "text": f"We received {paid.amount_paid} {paid.currency.upper()} "
                               f"for invoice {paid.id}."}).encode()
    request = urllib.request.Request(MAIL_SERVICE, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=1) as response:
        response.read()
    return "receipt sent"
