"""reconcile per source: `source` on reconcile_runs and failover_reconciles, each keyed by
its source as well (a Connect source and the platform's own are reconciled apart); the
partial index ix_webhook_events_account, the accounts a Connect source's events name

As migration 0013, every step is its own short transaction (autocommit), so no step holds
a lock for a scan: ADD COLUMN nullable without a default (metadata only), the backfill
source = provider (the provider's default source, the only one reconciled so far), NOT
NULL through a validated CHECK, the new primary keys' unique indexes built CONCURRENTLY
and swapped in USING INDEX (an instant of ACCESS EXCLUSIVE). Both tables are small (a row
per provider, a row per provider and failover); the clock is their only writer, and a
clock of the release before this one fails its runs (ON CONFLICT names the old key) until
it is replaced, and they are retried by the new one. The index on webhook_events is built
CONCURRENTLY (SHARE UPDATE EXCLUSIVE: the ingest writes on).

Revision ID: 0015
Revises: 0013
Create Date: 2026-12-02 05:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, its primary key's columns before, after)
KEYED = (
    ("reconcile_runs", "provider", "provider, source"),
    ("failover_reconciles", "timeline_id, provider", "timeline_id, provider, source"),
)


def upgrade() -> None:
    with op.get_context().autocommit_block():
        for table, _, columns in KEYED:
            op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS source text")
            op.execute(f"UPDATE {table} SET source = provider WHERE source IS NULL")
            _not_null(table)
            _swap_primary_key(table, columns)
        op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_webhook_events_account "
                   "ON webhook_events (provider, source, account) WHERE account IS NOT NULL")


def _not_null(table: str) -> None:
    check = f"ck_{table}_source_not_null"
    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {check} CHECK (source IS NOT NULL) "
               "NOT VALID")
    op.execute(f"UPDATE {table} SET source = provider WHERE source IS NULL")
    op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {check}")
    op.execute(f"ALTER TABLE {table} ALTER COLUMN source SET NOT NULL")
    op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {check}")


def _swap_primary_key(table: str, columns: str) -> None:
    index = f"pk_{table}_next"
    op.execute(f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {table} ({columns})")
    op.execute(f"ALTER TABLE {table} DROP CONSTRAINT pk_{table}, "
               f"ADD CONSTRAINT pk_{table} PRIMARY KEY USING INDEX {index}")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS ix_webhook_events_account")
        for table, columns, _ in KEYED:
            op.execute(f"DELETE FROM {table} WHERE source <> provider")
            op.execute(f"ALTER TABLE {table} DROP CONSTRAINT pk_{table}, "
                       f"ADD CONSTRAINT pk_{table} PRIMARY KEY ({columns})")
            op.execute(f"ALTER TABLE {table} DROP COLUMN source")
