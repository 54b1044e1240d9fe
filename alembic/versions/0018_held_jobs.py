"""held jobs: a paused source's pending jobs out of the claim's range of the pending index

`jobs.held` (boolean, NOT NULL DEFAULT false) marks a pending job whose source is paused
(shared/pausing.py). The pending index becomes (held, run_at, id) WHERE status = 'pending':
a claim reads the range held = false in its order, so a paused backlog at the head of the
queue is never walked past; resume and the sweeper read the range held = true; the pending
counts still scan one index, whole.

1. ADD COLUMN with a constant default: metadata only in PG 11 and later (no rewrite, an
   instant of ACCESS EXCLUSIVE). Every existing job reads as not held; the jobs of a
   source paused at upgrade time are kept out of the claims by the paused-source
   anti-join (queries.DUE) as before, and the clock's first sweep holds them.
2. The new index built CONCURRENTLY, in an autocommit block, before the old one is
   dropped CONCURRENTLY: the ingest writes and the workers claim throughout.

Revision ID: 0018
Revises: 0015
Create Date: 2026-12-02 07:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = sa.text("status = 'pending'")


def upgrade() -> None:
    op.add_column("jobs", sa.Column("held", sa.Boolean(), server_default=sa.text("false"),
                                    nullable=False))
    with op.get_context().autocommit_block():
        op.create_index("ix_jobs_pending_held_run_at_id", "jobs", ["held", "run_at", "id"],
                        postgresql_where=PENDING, postgresql_concurrently=True,
                        if_not_exists=True)
        op.drop_index("ix_jobs_pending_run_at_id", table_name="jobs",
                      postgresql_concurrently=True, if_exists=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index("ix_jobs_pending_run_at_id", "jobs", ["run_at", "id"],
                        postgresql_where=PENDING, postgresql_concurrently=True,
                        if_not_exists=True)
        op.drop_index("ix_jobs_pending_held_run_at_id", table_name="jobs",
                      postgresql_concurrently=True, if_exists=True)
    op.drop_column("jobs", "held")
