"""event listing and search indexes

The console and `webhooks events` list events newest first by (received_at, id), with
keyset pagination, and search the event id and the payload's words (shared/events.py:
SEARCH_DOCUMENT is this GIN index's expression). Both indexes are built CONCURRENTLY:
`release` on a large table must not block the ingest's inserts while they build.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 10:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEARCH = sa.text(
    "(to_tsvector('simple'::regconfig, event_id) || "
    "jsonb_to_tsvector('simple'::regconfig, payload, '[\"string\", \"numeric\"]'))"
)


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index("ix_webhook_events_received_at_id", "webhook_events",
                        ["received_at", "id"], postgresql_concurrently=True,
                        if_not_exists=True)
        op.create_index("ix_webhook_events_search", "webhook_events", [SEARCH],
                        postgresql_using="gin", postgresql_concurrently=True,
                        if_not_exists=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index("ix_webhook_events_search", table_name="webhook_events",
                      postgresql_concurrently=True, if_exists=True)
        op.drop_index("ix_webhook_events_received_at_id", table_name="webhook_events",
                      postgresql_concurrently=True, if_exists=True)
