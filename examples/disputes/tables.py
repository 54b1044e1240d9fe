"""The disputes app's table, on a MetaData of its own (never the core's): what its
migration history (migrations/) creates, and what `webhooks migrate --check` compares with
the database.

- disputes PRIMARY KEY (dispute_id): one row per Stripe dispute, whichever of its events
  comes first and however often (handlers.py, RecordDispute). `status` is the one of the
  newest event (`status_at`, the event's `created`), so events applied out of order leave
  the last status Stripe set.
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

disputes = Table(
    "disputes",
    metadata,
    Column("dispute_id", Text, nullable=False),
    Column("charge_id", Text, nullable=False),
    Column("amount", BigInteger, nullable=False),  # minor units, as Stripe sends it
    Column("currency", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("status_at", BigInteger, nullable=False),  # `created` of the event that set it
    Column("refund_id", Text),  # the refund's id, once an event finds its call sent
    Column("event_id", Text, nullable=False),  # the event that recorded it first
    Column("recorded_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("dispute_id", name="pk_disputes"),
)
