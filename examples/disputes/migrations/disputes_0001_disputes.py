"""disputes: one row per Stripe dispute

The first revision of the app's own history (version table
alembic_version_examples_disputes). A folder of revision scripts only: the project brings
env.py.

Revision ID: disputes_0001
Revises:
Create Date: 2026-12-06 02:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "disputes_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "disputes",
        sa.Column("dispute_id", sa.Text(), nullable=False),
        sa.Column("charge_id", sa.Text(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("status_at", sa.BigInteger(), nullable=False),
        sa.Column("refund_id", sa.Text(), nullable=True),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.PrimaryKeyConstraint("dispute_id", name="pk_disputes"),
    )


def downgrade() -> None:
    op.drop_table("disputes")
