"""FIXED check_then_insert: the invoice id is a unique key of the credit rows and the
insert is `ON CONFLICT (invoice_id) DO NOTHING`. Of two concurrent transactions inserting
one invoice, the second waits for the first's outcome and then inserts nothing (or, if the
first rolled back, inserts the row): one row per invoice under any schedule. The serial id
stays (its values differ between runs: a rolled-back insert uses up its value).
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from tests.apps.kit._payloads import INVOICE_TYPES, invoice
from webhooks import JobContext, handler

MIGRATIONS = Path(__file__).parent / "migrations" / "check_then_insert_fixed"

metadata = sa.MetaData()
credits = sa.Table(
    "kit_ctif_credits", metadata,
    sa.Column("id", sa.BigInteger, autoincrement=True),
    sa.Column("invoice_id", sa.Text, nullable=False),
    sa.Column("customer_id", sa.Text, nullable=False),
    sa.Column("amount_paid", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("id", name="pk_kit_ctif_credits"),
    sa.UniqueConstraint("invoice_id", name="uq_kit_ctif_credits_invoice_id"),
)
METADATA = metadata

CreditInsert = sa.text("""
    INSERT INTO kit_ctif_credits (invoice_id, customer_id, amount_paid, currency)
    VALUES (:invoice_id, :customer_id, :amount_paid, :currency)
    ON CONFLICT (invoice_id) DO NOTHING
    RETURNING id
""")


@handler("stripe", *INVOICE_TYPES)
def credit_invoice(ctx: JobContext) -> str:
    paid = invoice(ctx)
    first = ctx.fetch(CreditInsert, {"invoice_id": paid.id, "customer_id": paid.customer,
                                     "amount_paid": paid.amount_paid,
                                     "currency": paid.currency})
    return "credited" if first is not None else "already credited"
