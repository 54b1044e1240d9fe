"""clock heartbeat: a row per periodic task of the clock (the sweep), stamped each run with
the intervals the clock runs with, for /metrics' webhooks_clock_* gauges (a stopped clock is
otherwise silent)

A new table, written by the clock alone: nothing else locks or waits on it.

Revision ID: 0019
Revises: 0015
Create Date: 2026-12-02 06:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "clock_heartbeats",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("beat_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.Column("interval_seconds", sa.Float(), nullable=False),
        sa.Column("reconcile_interval_seconds", sa.Float(), nullable=False),
        sa.Column("reconcile_sources", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_clock_heartbeats")),
    )


def downgrade() -> None:
    op.drop_table("clock_heartbeats")
