"""The schema, as SQLAlchemy Core tables. Alembic migrations must match it (CI runs
`alembic check`). The constraints here carry the guarantees:

- webhook_events UNIQUE (provider, event_id): one row per logical event, however many
  deliveries.
- jobs UNIQUE (provider, event_id): one job per event.
- ledger_entries UNIQUE (entry_key): one ledger effect per business fact (an invoice is
  credited once even though Stripe sends invoice.paid and invoice.payment_succeeded).
- outbox UNIQUE (idempotency_key): one email per key.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

NOW = text("now()")

webhook_events = Table(
    "webhook_events",
    metadata,
    Column("id", BigInteger, Identity(), nullable=False),
    Column("provider", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("provider", "event_id"),
)

# One row per duplicate delivery, so `webhooks stats` can count duplicates per day.
webhook_duplicates = Table(
    "webhook_duplicates",
    metadata,
    Column("id", BigInteger, Identity(), nullable=False),
    Column("provider", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("id"),
    ForeignKeyConstraint(
        ["provider", "event_id"],
        ["webhook_events.provider", "webhook_events.event_id"],
        ondelete="CASCADE",
    ),
    Index(None, "provider", "event_id"),
    Index(None, "received_at"),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", BigInteger, Identity(), nullable=False),
    Column("provider", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("status", Text, nullable=False, server_default="pending"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
    Column("outcome", Text),
    Column("run_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("finished_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("provider", "event_id"),
    ForeignKeyConstraint(
        ["provider", "event_id"],
        ["webhook_events.provider", "webhook_events.event_id"],
        ondelete="CASCADE",
    ),
    CheckConstraint("status IN ('pending', 'done', 'failed')", name="status"),
    CheckConstraint("attempts >= 0", name="attempts"),
    # The claim query's index, in its ORDER BY (run_at, id): only due pending work is
    # scanned, and a claim reads its LIMIT rows even when thousands share one run_at (a
    # replay, a bulk insert) instead of sorting every pending row.
    Index("ix_jobs_pending_run_at_id", "run_at", "id",
          postgresql_where=text("status = 'pending'")),
    Index(None, "status", "finished_at"),
)

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

outbox = Table(
    "outbox",
    metadata,
    Column("id", BigInteger, Identity(), nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("status", Text, nullable=False, server_default="pending"),
    Column("to_address", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("text_body", Text, nullable=False),
    Column("html_body", Text, nullable=False),
    Column("provider", Text),
    Column("event_id", Text),
    Column("attempts", Integer, nullable=False, server_default="0"),
    # Set before each call to Postmark: a row with an attempt whose outcome was never
    # recorded is checked against Postmark's message search before it is sent again.
    Column("attempted_at", DateTime(timezone=True)),
    Column("run_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("last_error", Text),
    Column("message_id", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("sent_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("idempotency_key"),
    CheckConstraint("status IN ('pending', 'sent', 'failed')", name="status"),
    Index("ix_outbox_pending_run_at_id", "run_at", "id",
          postgresql_where=text("status = 'pending'")),
)
