"""kit_ssf_subscriptions: a subscription's status and the `created` of the event that
wrote it

Revision ID: kit_ssf_0001
Revises:
Create Date: 2026-12-06 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "kit_ssf_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "kit_ssf_subscriptions",
        sa.Column("subscription_id", sa.Text(), nullable=False),
        sa.Column("customer_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("event_created", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("subscription_id", name="pk_kit_ssf_subscriptions"),
    )


def downgrade() -> None:
    op.drop_table("kit_ssf_subscriptions")
