"""trace context stored with jobs and emails, so that a delivery's trace crosses processes

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 13:00:00.000000

Nullable columns with no default: adding them rewrites nothing and holds the table's lock
only for the catalog change.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("trace_context", sa.Text(), nullable=True))
    op.add_column("outbox", sa.Column("trace_context", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("outbox", "trace_context")
    op.drop_column("jobs", "trace_context")
