"""kit_ctif_credits: credit rows of paid invoices, one per invoice (UNIQUE invoice_id)

Revision ID: kit_ctif_0001
Revises:
Create Date: 2026-12-06 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "kit_ctif_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "kit_ctif_credits",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("invoice_id", sa.Text(), nullable=False),
        sa.Column("customer_id", sa.Text(), nullable=False),
        sa.Column("amount_paid", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_kit_ctif_credits"),
        sa.UniqueConstraint("invoice_id", name="uq_kit_ctif_credits_invoice_id"),
    )


def downgrade() -> None:
    op.drop_table("kit_ctif_credits")
