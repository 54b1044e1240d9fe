"""FIXED unkeyed_increment: the credit is keyed by the invoice. The handler first inserts
the invoice into a table of credited invoices (UNIQUE invoice_id, ON CONFLICT DO NOTHING
RETURNING) and raises the balance only when that insert returned a row: once per invoice,
whichever of its events comes first, in the same transaction as the balance. The same
audit check as the wrong app's, on this app's tables (under a name of its own: a check's
name is one per provider in a process that imports both apps).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tests.apps.kit import _balances
from tests.apps.kit._payloads import INVOICE_TYPES, invoice
from webhooks import Finding, JobContext, audit_check, handler

MIGRATIONS = Path(__file__).parent / "migrations" / "unkeyed_increment_fixed"

metadata = sa.MetaData()
credited_invoices = sa.Table(
    "kit_uif_credited_invoices", metadata,
    sa.Column("invoice_id", sa.Text, nullable=False),
    sa.Column("customer_id", sa.Text, nullable=False),
    sa.Column("amount_paid", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("invoice_id", name="pk_kit_uif_credited_invoices"),
)
balances = sa.Table(
    "kit_uif_balances", metadata,
    sa.Column("customer_id", sa.Text, nullable=False),
    sa.Column("balance", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("customer_id", name="pk_kit_uif_balances"),
)
METADATA = metadata

InvoiceCredited = sa.text("""
    INSERT INTO kit_uif_credited_invoices (invoice_id, customer_id, amount_paid)
    VALUES (:invoice_id, :customer_id, :amount)
    ON CONFLICT (invoice_id) DO NOTHING
    RETURNING invoice_id
""")
BalanceRaise = sa.text("""
    INSERT INTO kit_uif_balances (customer_id, balance) VALUES (:customer_id, :amount)
    ON CONFLICT (customer_id) DO UPDATE SET balance = kit_uif_balances.balance + EXCLUDED.balance
    RETURNING balance
""")


@handler("stripe", *INVOICE_TYPES)
def credit_invoice(ctx: JobContext) -> str:
    paid = invoice(ctx)
    params = {"invoice_id": paid.id, "customer_id": paid.customer, "amount": paid.amount_paid}
    if ctx.fetch(InvoiceCredited, params) is None:
        return "already credited"
    ctx.fetch(BalanceRaise, params)
    return "credited"


@audit_check("stripe", "one_credit_per_invoice_fixed")
def one_credit_per_invoice(conn: Connection, since: datetime | None) -> Iterator[Finding]:
    """Each customer's balance is the sum of its distinct paid invoices (`since` aside)."""
    return _balances.mismatches(conn, "kit_uif_balances")
