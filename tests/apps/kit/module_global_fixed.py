"""FIXED module_global: no module state. The credit row's key (UNIQUE invoice_id, ON
CONFLICT DO NOTHING) is the only memory of what was credited, and it is rolled back with
the batch: a rerun finds no row and writes it.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from tests.apps.kit._payloads import INVOICE_TYPES, invoice
from webhooks import JobContext, handler

MIGRATIONS = Path(__file__).parent / "migrations" / "module_global_fixed"

metadata = sa.MetaData()
credits = sa.Table(
    "kit_mgf_credits", metadata,
    sa.Column("invoice_id", sa.Text, nullable=False),
    sa.Column("customer_id", sa.Text, nullable=False),
    sa.Column("amount_paid", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("invoice_id", name="pk_kit_mgf_credits"),
)
METADATA = metadata

CreditInsert = sa.text("""
    INSERT INTO kit_mgf_credits (invoice_id, customer_id, amount_paid, currency)
    VALUES (:invoice_id, :customer_id, :amount_paid, :currency)
    ON CONFLICT (invoice_id) DO NOTHING
    RETURNING invoice_id
""")


@handler("stripe", *INVOICE_TYPES)
def credit_invoice(ctx: JobContext) -> str:
    paid = invoice(ctx)
    first = ctx.fetch(CreditInsert, {"invoice_id": paid.id, "customer_id": paid.customer,
                                     "amount_paid": paid.amount_paid,
                                     "currency": paid.currency})
    return "credited" if first is not None else "already credited"
