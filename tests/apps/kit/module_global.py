"""WRONG: module state that outlives a rollback. The credit row itself is right (UNIQUE
invoice_id, ON CONFLICT DO NOTHING), but the handler first looks in a module-level set of
the invoices this process already credited, and skips those. Python state is not
transactional: when the batch the handler ran in rolls back (a neighbour job failed, a
deadlock, a crash before the commit), the set still says "credited", and the job's rerun,
and the invoice's other event, skip it: the credit row is never written. Fixed:
module_global_fixed.py.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from tests.apps.kit._payloads import INVOICE_TYPES, invoice
from webhooks import JobContext, handler

MIGRATIONS = Path(__file__).parent / "migrations" / "module_global"

# The invoices credited "already", as this process remembers them: the bug.
CREDITED: set[str] = set()

metadata = sa.MetaData()
credits = sa.Table(
    "kit_mg_credits", metadata,
    sa.Column("invoice_id", sa.Text, nullable=False),
    sa.Column("customer_id", sa.Text, nullable=False),
    sa.Column("amount_paid", sa.BigInteger, nullable=False),
    sa.Column("currency", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("invoice_id", name="pk_kit_mg_credits"),
)
METADATA = metadata

CreditInsert = sa.text("""
    INSERT INTO kit_mg_credits (invoice_id, customer_id, amount_paid, currency)
    VALUES (:invoice_id, :customer_id, :amount_paid, :currency)
    ON CONFLICT (invoice_id) DO NOTHING
    RETURNING invoice_id
""")


@handler("stripe", *INVOICE_TYPES)
def credit_invoice(ctx: JobContext) -> str:
    paid = invoice(ctx)
    if paid.id in CREDITED:
        return "already credited (remembered)"
    first = ctx.fetch(CreditInsert, {"invoice_id": paid.id, "customer_id": paid.customer,
                                     "amount_paid": paid.amount_paid,
                                     "currency": paid.currency})
    CREDITED.add(paid.id)
    return "credited" if first is not None else "already credited"
