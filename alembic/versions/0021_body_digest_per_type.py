"""a body is a duplicate under its own event type only: the body digest's unique index
takes the event type

Shopify sends one order as `orders/create` and `orders/paid`, byte for byte the same body,
and GitHub's and Shopify's event types are headers outside the signature like their ids.
The unique index of 0009 on (provider, body_sha256) made the second topic a duplicate of
the first, so it never took effect. A re-sent captured delivery is still one: the same
body under the same type, whatever its new id.

In place, with nothing waiting on it: the new unique index is built CONCURRENTLY (SHARE
UPDATE EXCLUSIVE: inserts go on; it cannot fail on existing rows, which 0009's index kept
unique on fewer columns), then 0009's index is dropped CONCURRENTLY, last, so that a
duplicate body is refused by one index or the other throughout. An index left invalid by
an interrupted build is dropped and built again.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05 22:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NEW, OLD = "ux_webhook_events_body_type", "ux_webhook_events_body"


def upgrade() -> None:
    with op.get_context().autocommit_block():
        _drop_if_invalid(NEW)
        op.create_index(NEW, "webhook_events", ["provider", "body_sha256", "event_type"],
                        unique=True, postgresql_where=sa.text("body_sha256 IS NOT NULL"),
                        postgresql_concurrently=True, if_not_exists=True)
        op.drop_index(OLD, table_name="webhook_events", postgresql_concurrently=True,
                      if_exists=True)


def downgrade() -> None:
    # Back to one event per body: fails (and leaves the new index) if two types share one.
    with op.get_context().autocommit_block():
        _drop_if_invalid(OLD)
        op.create_index(OLD, "webhook_events", ["provider", "body_sha256"], unique=True,
                        postgresql_where=sa.text("body_sha256 IS NOT NULL"),
                        postgresql_concurrently=True, if_not_exists=True)
        op.drop_index(NEW, table_name="webhook_events", postgresql_concurrently=True,
                      if_exists=True)


def _drop_if_invalid(name: str) -> None:
    invalid = op.get_bind().exec_driver_sql(
        "SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(%(name)s) AND NOT indisvalid",
        {"name": name}).first()
    if invalid is not None:
        op.drop_index(name, table_name="webhook_events", postgresql_concurrently=True)
