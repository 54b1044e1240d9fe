"""claim indexes in the claims' order (run_at, id)

The jobs and outbox claims read `ORDER BY run_at, id LIMIT n FOR UPDATE SKIP LOCKED`.
With an index on run_at alone, rows sharing one run_at (a replay, a bulk insert) were all
sorted on every claim; in the claims' order, a claim reads only its LIMIT rows.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 06:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = sa.text("status = 'pending'")


def upgrade() -> None:
    for table in ("jobs", "outbox"):
        op.create_index(f"ix_{table}_pending_run_at_id", table, ["run_at", "id"],
                        unique=False, postgresql_where=PENDING)
        op.drop_index(f"ix_{table}_pending_run_at", table_name=table, postgresql_where=PENDING)


def downgrade() -> None:
    for table in ("jobs", "outbox"):
        op.create_index(f"ix_{table}_pending_run_at", table, ["run_at"], unique=False,
                        postgresql_where=PENDING)
        op.drop_index(f"ix_{table}_pending_run_at_id", table_name=table,
                      postgresql_where=PENDING)
