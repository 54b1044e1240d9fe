"""kit_mg_credits: one row per paid invoice (PRIMARY KEY invoice_id)

Revision ID: kit_mg_0001
Revises:
Create Date: 2026-12-06 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "kit_mg_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "kit_mg_credits",
        sa.Column("invoice_id", sa.Text(), nullable=False),
        sa.Column("customer_id", sa.Text(), nullable=False),
        sa.Column("amount_paid", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("invoice_id", name="pk_kit_mg_credits"),
    )


def downgrade() -> None:
    op.drop_table("kit_mg_credits")
