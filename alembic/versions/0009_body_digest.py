"""a body recorded once is a duplicate, for providers that do not sign their ids

GitHub and Shopify sign the body only; the event id and type are headers outside the
signature, so a captured delivery re-sent with new ids minted new events. The ingest now
stores the SHA-256 of such a body (models.webhook_events.body_sha256), unique per
provider. A nullable column without a default is added without rewriting the table, and
the unique partial index is built CONCURRENTLY: `release` blocks no insert.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 21:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("webhook_events", sa.Column("body_sha256", sa.LargeBinary(), nullable=True))
    with op.get_context().autocommit_block():
        op.create_index("ux_webhook_events_body", "webhook_events", ["provider", "body_sha256"],
                        unique=True, postgresql_where=sa.text("body_sha256 IS NOT NULL"),
                        postgresql_concurrently=True, if_not_exists=True)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index("ux_webhook_events_body", table_name="webhook_events",
                      postgresql_concurrently=True, if_exists=True)
    op.drop_column("webhook_events", "body_sha256")
