"""sources: `source` on events, jobs and duplicates; Stripe's `account` and `livemode`; the
dedup key per provider (per source for `standard`)

Every step runs in its own short transaction (autocommit), so the ingest waits at most
for one brief lock at a time, never for a scan or a rewrite of a large table:

1. ADD COLUMN source, account, livemode (and event_source on webhook_duplicates), nullable,
   no default: metadata only. ACCESS EXCLUSIVE on each table for an instant.
2. Backfill source = provider (and event_source) in batches of BATCH rows, each its own
   transaction: ROW EXCLUSIVE and row locks on one batch at a time; the ingest keeps
   writing beside it. Repeated until no row is left without its source.
3. CHECK (source IS NOT NULL) NOT VALID (an instant of ACCESS EXCLUSIVE), the backfill
   again for the rows inserted meanwhile, VALIDATE (SHARE
   UPDATE EXCLUSIVE: a scan that blocks no reads nor writes), then SET NOT NULL, which
   Postgres proves from the validated CHECK without a scan (an instant of ACCESS
   EXCLUSIVE), and the CHECK dropped.
4. The new unique indexes built CONCURRENTLY (SHARE UPDATE EXCLUSIVE: writes go on):
   webhook_events (provider, source, event_id), webhook_events (provider, event_id) WHERE
   provider <> 'standard' (the dedup key of every provider but `standard`), and jobs
   (provider, source, event_id).
5. UNIQUE constraints added USING INDEX (an instant of ACCESS EXCLUSIVE: no build).
6. The foreign keys of jobs and duplicates on the three columns: the old one dropped and
   the new one added NOT VALID in one instant (SHARE ROW EXCLUSIVE on both tables), then
   VALIDATEd (SHARE UPDATE EXCLUSIVE on the referencing table, ROW SHARE on events).
7. The old UNIQUE (provider, event_id) constraints dropped (an instant).

A process of the release before this one still writing during steps 1-3 inserts rows
without a source: the backfill takes them, and once the CHECK is added (step 3) such an
insert is refused; deploy so that the old processes are stopped by then (the `release`
phase runs before the new processes start, the old ones still answer until they go: a
delivery they fail is answered 500 and retried by the provider).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 04:30:00.000000
"""

from collections.abc import Sequence

from alembic import context, op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 10_000  # rows per backfill transaction; a test sets config.attributes["backfill_batch"]
SOURCED = ("webhook_events", "jobs", "webhook_duplicates")
# (table, index, columns, predicate): the unique indexes, built before their constraints.
UNIQUE_INDEXES = (
    ("webhook_events", "uq_webhook_events_provider_source_event_id",
     "provider, source, event_id", ""),
    ("webhook_events", "ux_webhook_events_provider_event_id", "provider, event_id",
     " WHERE provider <> 'standard'"),
    ("jobs", "uq_jobs_provider_source_event_id", "provider, source, event_id", ""),
)
# (table, foreign key, its columns): both refer to webhook_events (provider, source, event_id).
FOREIGN_KEYS = (
    ("jobs", "fk_jobs_provider_webhook_events", "provider, source, event_id"),
    ("webhook_duplicates", "fk_webhook_duplicates_provider_webhook_events",
     "provider, event_source, event_id"),
)


def upgrade() -> None:
    with op.get_context().autocommit_block():
        _add_columns()
        for table in SOURCED:
            _backfill(table)
            _not_null(table, "source")
        _not_null("webhook_duplicates", "event_source")
        for table, index, columns, predicate in UNIQUE_INDEXES:
            op.execute(f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {index} "
                       f"ON {table} ({columns}){predicate}")
        for table, index, _, predicate in UNIQUE_INDEXES:
            if not predicate:
                op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {index} UNIQUE USING INDEX {index}")
        for table, key, columns in FOREIGN_KEYS:
            _replace_foreign_key(table, key, columns)
        op.execute("ALTER TABLE jobs DROP CONSTRAINT uq_jobs_provider_event_id")
        op.execute("ALTER TABLE webhook_events DROP CONSTRAINT uq_webhook_events_provider_event_id")


def _add_columns() -> None:
    for table in SOURCED:
        op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS source text")
    op.execute("ALTER TABLE webhook_duplicates ADD COLUMN IF NOT EXISTS event_source text")
    op.execute("ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS account text, "
               "ADD COLUMN IF NOT EXISTS livemode boolean")


def _backfill(table: str) -> None:
    """source = provider, BATCH rows per transaction (each op.execute commits on its own
    in the autocommit block), until none is left."""
    extra = ", event_source = provider" if table == "webhook_duplicates" else ""
    bind = op.get_bind()
    batch = int(context.config.attributes.get("backfill_batch", BATCH))
    while True:
        result = bind.exec_driver_sql(
            f"UPDATE {table} SET source = provider{extra} WHERE id IN "
            f"(SELECT id FROM {table} WHERE source IS NULL LIMIT {batch})")
        if result.rowcount == 0:
            break


def _not_null(table: str, column: str) -> None:
    """NOT NULL without a scan under ACCESS EXCLUSIVE. The backfill runs again once the
    CHECK holds for new rows: a row an old process inserted between the first backfill and
    the CHECK gets its source before VALIDATE scans."""
    check = f"ck_{table}_{column}_not_null"
    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {check} CHECK ({column} IS NOT NULL) "
               "NOT VALID")
    if column == "source":
        _backfill(table)
    op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {check}")
    op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL")
    op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {check}")


def _replace_foreign_key(table: str, key: str, columns: str) -> None:
    op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {key}, ADD CONSTRAINT {key} "
               f"FOREIGN KEY ({columns}) REFERENCES webhook_events (provider, source, event_id) "
               "ON DELETE CASCADE NOT VALID")
    op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {key}")


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("DELETE FROM webhook_events WHERE provider = 'standard' AND id NOT IN "
                   "(SELECT min(id) FROM webhook_events GROUP BY provider, event_id)")
        op.execute("ALTER TABLE webhook_events ADD CONSTRAINT uq_webhook_events_provider_event_id "
                   "UNIQUE (provider, event_id)")
        op.execute("ALTER TABLE jobs ADD CONSTRAINT uq_jobs_provider_event_id "
                   "UNIQUE (provider, event_id)")
        for table, key, _ in FOREIGN_KEYS:
            op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {key}, ADD CONSTRAINT {key} "
                       "FOREIGN KEY (provider, event_id) REFERENCES webhook_events "
                       "(provider, event_id) ON DELETE CASCADE")
        op.execute("ALTER TABLE jobs DROP CONSTRAINT uq_jobs_provider_source_event_id")
        op.execute("ALTER TABLE webhook_events DROP CONSTRAINT "
                   "uq_webhook_events_provider_source_event_id")
        op.execute("DROP INDEX ux_webhook_events_provider_event_id")
        for table in SOURCED:
            op.execute(f"ALTER TABLE {table} DROP COLUMN source")
        op.execute("ALTER TABLE webhook_duplicates DROP COLUMN event_source")
        op.execute("ALTER TABLE webhook_events DROP COLUMN account, DROP COLUMN livemode")
