"""a search document no payload can overflow

A tsvector holds at most 1 MB, and the search index of migration 0003 built one from every
word of the payload: a valid body of a megabyte or so of distinct words failed its insert
(SQLSTATE 54000), and the ingest answered 503 until the provider gave up. The new index's
document (models.EVENT_SEARCH_DOCUMENT) takes the words of a payload over 256 KB (as text)
from its first 64K characters only, so it stays under the limit. Built CONCURRENTLY before
the old one is dropped: `release` blocks no insert, and search keeps an index throughout.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 21:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# models.EVENT_SEARCH_DOCUMENT as this revision wrote it.
BOUNDED = sa.text(
    "(to_tsvector('simple'::regconfig, event_id) || "
    "CASE WHEN octet_length((payload)::text) <= 262144 "
    "THEN jsonb_to_tsvector('simple'::regconfig, payload, '[\"string\", \"numeric\"]'::jsonb) "
    "ELSE to_tsvector('simple'::regconfig, left((payload)::text, 65536)) END)"
)
UNBOUNDED = sa.text(
    "(to_tsvector('simple'::regconfig, event_id) || "
    "jsonb_to_tsvector('simple'::regconfig, payload, '[\"string\", \"numeric\"]'))"
)


def upgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index("ix_webhook_events_search_bounded", "webhook_events", [BOUNDED],
                        postgresql_using="gin", postgresql_concurrently=True,
                        if_not_exists=True)
        op.drop_index("ix_webhook_events_search", table_name="webhook_events",
                      postgresql_concurrently=True, if_exists=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.create_index("ix_webhook_events_search", "webhook_events", [UNBOUNDED],
                        postgresql_using="gin", postgresql_concurrently=True,
                        if_not_exists=True)
        op.drop_index("ix_webhook_events_search_bounded", table_name="webhook_events",
                      postgresql_concurrently=True, if_exists=True)
