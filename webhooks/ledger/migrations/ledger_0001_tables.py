"""the reference app's tables: accounts, ledger_entries, subscriptions

The first revision of the reference app's own history (version table
alembic_version_webhooks_ledger, see webhooks/migrate.py). Until this history existed the
core's revision 0001 created these three tables, exactly as below: a database migrated
before keeps them and their rows, and this revision recognises them (each table and index
is created only where absent: CREATE ... IF NOT EXISTS), then records itself as applied.
Nothing is dropped, altered or rewritten.

Revision ID: ledger_0001
Revises:
Create Date: 2026-12-01 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "ledger_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("customer_id", sa.Text(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("balance", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("customer_id", "currency", name=op.f("pk_accounts")),
        if_not_exists=True,
    )
    op.create_table(
        "subscriptions",
        sa.Column("subscription_id", sa.Text(), nullable=False),
        sa.Column("customer_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("last_event_created", sa.BigInteger(), nullable=False),
        sa.Column("last_event_id", sa.Text(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("subscription_id", name=op.f("pk_subscriptions")),
        if_not_exists=True,
    )
    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("customer_id", sa.Text(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("entry_key", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("reference", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["customer_id", "currency"],
            ["accounts.customer_id", "accounts.currency"],
            name=op.f("fk_ledger_entries_customer_id_accounts"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
        sa.UniqueConstraint("entry_key", name=op.f("uq_ledger_entries_entry_key")),
        if_not_exists=True,
    )
    op.create_index(
        op.f("ix_ledger_entries_customer_id_currency"),
        "ledger_entries",
        ["customer_id", "currency"],
        unique=False,
        if_not_exists=True,
    )
    op.create_index(
        op.f("ix_ledger_entries_kind_reference"),
        "ledger_entries",
        ["kind", "reference"],
        unique=False,
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_ledger_entries_kind_reference"), table_name="ledger_entries")
    op.drop_index(op.f("ix_ledger_entries_customer_id_currency"), table_name="ledger_entries")
    op.drop_table("ledger_entries")
    op.drop_table("subscriptions")
    op.drop_table("accounts")
