"""The ledger's tables, on a MetaData of the app's own (`metadata`, with the core's naming
convention): the app's migration history (webhooks/ledger/migrations/, MIGRATIONS in
webhooks/ledger/__init__.py) creates them, and `webhooks migrate --check` compares them with
the database (the core's `alembic check` compares only the core's tables). The
constraint that carries the ledger's guarantee:

- ledger_entries UNIQUE (entry_key): one ledger effect per business fact (an invoice is
  credited once even though Stripe sends invoice.paid and invoice.payment_succeeded).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
)

from webhooks.shared.models import NOW
from webhooks.shared.models import metadata as core

metadata = MetaData(naming_convention=core.naming_convention)

accounts = Table(
    "accounts",
    metadata,
    Column("customer_id", Text, nullable=False),
    Column("currency", Text, nullable=False),
    Column("balance", BigInteger, nullable=False, server_default="0"),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("customer_id", "currency"),
)

ledger_entries = Table(
    "ledger_entries",
    metadata,
    Column("id", BigInteger, Identity(), nullable=False),
    Column("customer_id", Text, nullable=False),
    Column("currency", Text, nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("provider", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("entry_key", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("reference", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("entry_key"),
    ForeignKeyConstraint(
        ["customer_id", "currency"], ["accounts.customer_id", "accounts.currency"]
    ),
    Index(None, "customer_id", "currency"),
    Index(None, "kind", "reference"),
)

subscriptions = Table(
    "subscriptions",
    metadata,
    Column("subscription_id", Text, nullable=False),
    Column("customer_id", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("last_event_created", BigInteger, nullable=False),
    Column("last_event_id", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("subscription_id"),
)
