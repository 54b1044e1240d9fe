"""database timelines: failovers seen, and the reconciliation after each

database_timelines: every timeline the server was seen writing on (the first is the
start, each later one a failover); failover_reconciles: the providers reconciled over the
whole window after a failover. Two new tables: no existing table is rewritten or locked.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "database_timelines",
        sa.Column("timeline_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.Column("failover", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("timeline_id", name=op.f("pk_database_timelines")),
    )
    op.create_table(
        "failover_reconciles",
        sa.Column("timeline_id", sa.BigInteger(), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.ForeignKeyConstraint(["timeline_id"], ["database_timelines.timeline_id"],
                                name=op.f("fk_failover_reconciles_timeline_id_database_timelines"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("timeline_id", "provider", name=op.f("pk_failover_reconciles")),
    )


def downgrade() -> None:
    op.drop_table("failover_reconciles")
    op.drop_table("database_timelines")
