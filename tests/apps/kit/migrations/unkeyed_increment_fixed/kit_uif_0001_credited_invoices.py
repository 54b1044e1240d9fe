"""kit_uif_credited_invoices (one row per credited invoice) and kit_uif_balances (a
balance per customer)

Revision ID: kit_uif_0001
Revises:
Create Date: 2026-12-06 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "kit_uif_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "kit_uif_credited_invoices",
        sa.Column("invoice_id", sa.Text(), nullable=False),
        sa.Column("customer_id", sa.Text(), nullable=False),
        sa.Column("amount_paid", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("invoice_id", name="pk_kit_uif_credited_invoices"),
    )
    op.create_table(
        "kit_uif_balances",
        sa.Column("customer_id", sa.Text(), nullable=False),
        sa.Column("balance", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("customer_id", name="pk_kit_uif_balances"),
    )


def downgrade() -> None:
    op.drop_table("kit_uif_balances")
    op.drop_table("kit_uif_credited_invoices")
