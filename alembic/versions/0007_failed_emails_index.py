"""failed emails through a partial index

`/metrics` counts the failed emails on every refresh and the console lists them; without
an index both read the whole outbox. Built CONCURRENTLY: `release` must not block the
workers' inserts into a large outbox while it builds.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 13:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index("ix_outbox_failed_id", "outbox", ["id"],
                        postgresql_where=sa.text("status = 'failed'"),
                        postgresql_concurrently=True, if_not_exists=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index("ix_outbox_failed_id", table_name="outbox", postgresql_concurrently=True,
                      if_exists=True)
