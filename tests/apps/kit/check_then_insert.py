"""WRONG: check, then insert. One credit row per paid invoice, guarded by a SELECT instead
of a key: the table has no unique key on invoice_id (only a serial id), and the handler
inserts when its SELECT found no row.

Applied one at a time this is right: the invoice's second event finds the first one's row.
But the invoice's two events (`invoice.paid`, `invoice.payment_succeeded`) in two batches
at once run in concurrent transactions: neither sees the other's uncommitted row, so both
insert, and the invoice has two credit rows. Fixed: check_then_insert_fixed.py.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from tests.apps.kit._payloads import INVOICE_TYPES, invoice
from webhooks import JobContext, handler

MIGRATIONS = Path(__file__).parent / "migrations" / "check_then_insert"

metadata = sa.MetaData()
credits = sa.Table(
    "kit_cti_credits", metadata,
    sa.Column("id", sa.BigInteger, autoincrement=True),
    sa.Column("invoice_id", sa.Text, nullable=False),  # no unique key: the bug
    sa.Column("customer_id", sa.Text, nullable=False),
    sa.Column("amount_paid", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("id", name="pk_kit_cti_credits"),
)
METADATA = metadata

CreditFound = sa.text("SELECT 1 FROM kit_cti_credits WHERE invoice_id = :invoice_id")
CreditInsert = sa.text("""
    INSERT INTO kit_cti_credits (invoice_id, customer_id, amount_paid, currency)
    VALUES (:invoice_id, :customer_id, :amount_paid, :currency)
""")


@handler("stripe", *INVOICE_TYPES)
def credit_invoice(ctx: JobContext) -> str:
    paid = invoice(ctx)
    if ctx.fetch(CreditFound, {"invoice_id": paid.id}) is not None:
        return "already credited"
    ctx.conn.execute(CreditInsert, {"invoice_id": paid.id, "customer_id": paid.customer,
                                    "amount_paid": paid.amount_paid,
                                    "currency": paid.currency})
    return "credited"
