"""WRONG: an increment keyed by nothing. Each invoice event adds amount_paid to its
customer's balance (an upsert, `balance = balance + amount`), but Stripe sends two events
for one payment (`invoice.paid` and `invoice.payment_succeeded`), so every invoice is
credited twice, once per event type. Duplicate deliveries of one event do not show it (the
event table drops them) and every schedule doubles alike, so the tables match the
reference: the audit check `one_credit_per_invoice` is what finds it, on every run,
the reference included. Fixed: unkeyed_increment_fixed.py.
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

MIGRATIONS = Path(__file__).parent / "migrations" / "unkeyed_increment"

metadata = sa.MetaData()
balances = sa.Table(
    "kit_ui_balances", metadata,
    sa.Column("customer_id", sa.Text, nullable=False),
    sa.Column("balance", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("customer_id", name="pk_kit_ui_balances"),
)
METADATA = metadata

BalanceRaise = sa.text("""
    INSERT INTO kit_ui_balances (customer_id, balance) VALUES (:customer_id, :amount)
    ON CONFLICT (customer_id) DO UPDATE SET balance = kit_ui_balances.balance + EXCLUDED.balance
    RETURNING balance
""")


@handler("stripe", *INVOICE_TYPES)
def credit_invoice(ctx: JobContext) -> str:
    paid = invoice(ctx)
    ctx.fetch(BalanceRaise, {"customer_id": paid.customer, "amount": paid.amount_paid})
    return "credited"


@audit_check("stripe", "one_credit_per_invoice")
def one_credit_per_invoice(conn: Connection, since: datetime | None) -> Iterator[Finding]:
    """Each customer's balance is the sum of its distinct paid invoices (`since` aside)."""
    return _balances.mismatches(conn, "kit_ui_balances")
