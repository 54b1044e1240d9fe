"""event_search: the search documents in a narrow table the worker fills, not a GIN index
on webhook_events that the ingest's transaction keeps up to date

The GIN index of migration 0008 was maintained by every acknowledgement's insert (GIN's
pending list is flushed by whichever insert fills it): the ingest paid for the search.
From here the worker writes each event's document (models.EVENT_SEARCH_DOCUMENT) into
event_search in its job's transaction (shared/queries.py, JobMarkDoneMany), and the
search reads it (shared/events.py). Nothing blocks the ingest while this runs:

1. CREATE TABLE event_search (new, so no one waits on it).
2. Backfill every event's document, BATCH events per transaction in id order (each
   op.execute commits on its own in the autocommit block): it reads webhook_events (no
   lock an insert waits for) and writes only event_search. Then the GIN index, built
   CONCURRENTLY in one pass (faster than row by row), and the backfill again from where it
   stopped, for the events recorded meanwhile: every event that existed before this
   migration ends stays searchable. The index's pending list may hold 64 MB
   (gin_pending_list_limit): the clock's sweep merges it (queries.EventSearchFlush), not
   the worker's batches.
3. The old GIN index dropped CONCURRENTLY (SHARE UPDATE EXCLUSIVE: writes go on), last,
   so that the release before this one keeps its index until the new one is complete.

A worker of the release before this one writes no document: an event whose job such a
worker runs after the backfill's last batch (the old processes still run while the release
phase migrates) stays searchable by its id only. Stop the old workers before the release
phase to leave none.

Revision ID: 0017
Revises: 0015
Create Date: 2026-12-02 07:00:00.000000
"""

from collections.abc import Sequence

from alembic import context, op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 10_000  # events per backfill transaction; a test sets config.attributes["backfill_batch"]
# models.EVENT_SEARCH_DOCUMENT as this revision writes it: 0008's index expression.
DOCUMENT = (
    "(to_tsvector('simple'::regconfig, event_id) || "
    "CASE WHEN octet_length((payload)::text) <= 262144 "
    "THEN jsonb_to_tsvector('simple'::regconfig, payload, '[\"string\", \"numeric\"]'::jsonb) "
    "ELSE to_tsvector('simple'::regconfig, left((payload)::text, 65536)) END)"
)


def upgrade() -> None:
    op.execute("""
        CREATE TABLE IF NOT EXISTS event_search (
            provider text NOT NULL,
            source text NOT NULL,
            event_id text NOT NULL,
            document tsvector NOT NULL,
            CONSTRAINT pk_event_search PRIMARY KEY (provider, source, event_id)
        )
    """)
    with op.get_context().autocommit_block():
        last = _backfill(0)
        op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_event_search_document "
                   "ON event_search USING gin (document) WITH (gin_pending_list_limit = 65536)")
        _backfill(last)
        op.drop_index("ix_webhook_events_search_bounded", table_name="webhook_events",
                      postgresql_concurrently=True, if_exists=True)


def _backfill(after: int) -> int:
    """Documents of the events with an id above `after`, a batch per transaction, until
    none is left; returns the last id seen."""
    bind = op.get_bind()
    batch = int(context.config.attributes.get("backfill_batch", BATCH))
    while True:
        last = bind.exec_driver_sql(f"""
            WITH batch AS (
                SELECT id, provider, source, event_id, {DOCUMENT} AS document
                FROM webhook_events WHERE id > {int(after)} ORDER BY id LIMIT {batch}
            ), written AS (
                INSERT INTO event_search (provider, source, event_id, document)
                SELECT provider, source, event_id, document FROM batch
                ON CONFLICT DO NOTHING
            )
            SELECT max(id) FROM batch
        """).scalar()
        if last is None:
            return after
        after = int(last)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_webhook_events_search_bounded "
                   f"ON webhook_events USING gin ({DOCUMENT})")
        op.execute("DROP TABLE IF EXISTS event_search")
