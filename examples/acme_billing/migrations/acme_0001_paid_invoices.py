"""acme_paid_invoices: one row per paid invoice

The first revision of the app's own history (version table alembic_version_acme_billing).
A folder of revision scripts only: the project brings env.py.

Revision ID: acme_0001
Revises:
Create Date: 2026-12-06 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "acme_0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "acme_paid_invoices",
        sa.Column("invoice_id", sa.Text(), nullable=False),
        sa.Column("customer_id", sa.Text(), nullable=False),
        sa.Column("amount_paid", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.Text(), nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.PrimaryKeyConstraint("invoice_id", name="pk_acme_paid_invoices"),
    )


def downgrade() -> None:
    op.drop_table("acme_paid_invoices")
