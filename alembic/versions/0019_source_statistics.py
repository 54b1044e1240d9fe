"""source statistics: the planner's most common (provider, source) pairs of webhook_events,
jobs and webhook_duplicates, for the console's overview on large tables

Past 100,000 rows the overview estimates its per-source counts as `/metrics` does its done
count: the table's row estimate (pg_class.reltuples) times the pair's share. Postgres keeps
shares per column only unless told otherwise: an extended statistics object of kind `mcv`
on (provider, source) makes every ANALYZE (autovacuum's too) record the most common pairs
and their frequencies (pg_stats_ext). CREATE STATISTICS reads no row and takes a SHARE
UPDATE EXCLUSIVE lock (writes go on); the shares appear at the table's next ANALYZE, and
until then the overview counts exactly.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 07:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("webhook_events", "jobs", "webhook_duplicates")


def upgrade() -> None:
    for table in TABLES:
        op.execute(f"CREATE STATISTICS IF NOT EXISTS st_{table}_provider_source (mcv) "
                   f"ON provider, source FROM {table}")


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"DROP STATISTICS IF EXISTS st_{table}_provider_source")
