"""audit results: the clock's last audit, per check, for /metrics

Revision ID: 0012
Revises: 0010
Create Date: 2026-12-02 04:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_results",
        sa.Column("check_name", sa.Text(), nullable=False),
        sa.Column("violations", sa.Integer(), nullable=False),
        sa.Column("ran_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.PrimaryKeyConstraint("check_name", name=op.f("pk_audit_results")),
    )


def downgrade() -> None:
    op.drop_table("audit_results")
