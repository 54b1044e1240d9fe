"""kit_ui_balances: a balance per customer

Revision ID: kit_ui_0001
Revises:
Create Date: 2026-12-06 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "kit_ui_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "kit_ui_balances",
        sa.Column("customer_id", sa.Text(), nullable=False),
        sa.Column("balance", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("customer_id", name="pk_kit_ui_balances"),
    )


def downgrade() -> None:
    op.drop_table("kit_ui_balances")
