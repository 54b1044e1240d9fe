"""Acme's table, on a MetaData of its own (never the core's): what its migration history
(migrations/) creates, and what `webhooks migrate --check` compares with the database.

- acme_paid_invoices PRIMARY KEY (invoice_id): one row per paid invoice, whichever of its
  events carries it and however often (handlers.py, RecordPaidInvoice).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    func,
)

metadata = MetaData()

paid_invoices = Table(
    "acme_paid_invoices",
    metadata,
    Column("invoice_id", Text, nullable=False),
    Column("customer_id", Text, nullable=False),
    Column("amount_paid", BigInteger, nullable=False),  # minor units, as Stripe sends it
    Column("currency", Text, nullable=False),
    Column("event_id", Text, nullable=False),  # the event that recorded it first
    Column("recorded_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("invoice_id", name="pk_acme_paid_invoices"),
)
