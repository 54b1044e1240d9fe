"""paused providers: their deliveries are recorded, their jobs not claimed

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 11:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "paused_providers",
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.PrimaryKeyConstraint("provider", name=op.f("pk_paused_providers")),
    )


def downgrade() -> None:
    op.drop_table("paused_providers")
