"""reconciliation: how each event was first recorded, and each provider's last run

webhook_events.received_via: `delivery` or `reconcile`. Added with a constant default
(no table rewrite) and its CHECK validated after the adding transaction committed
(validation scans the table under a lock that does not block the ingest's inserts).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:55:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("webhook_events", sa.Column("received_via", sa.Text(),
                                              server_default="delivery", nullable=False))
    op.execute("ALTER TABLE webhook_events ADD CONSTRAINT ck_webhook_events_received_via "
               "CHECK (received_via IN ('delivery', 'reconcile')) NOT VALID")
    with op.get_context().autocommit_block():  # the brief locks above end first
        op.execute("ALTER TABLE webhook_events "
                   "VALIDATE CONSTRAINT ck_webhook_events_received_via")
        op.create_index("ix_webhook_events_reconciled", "webhook_events", ["provider"],
                        postgresql_where=sa.text("received_via = 'reconcile'"),
                        postgresql_concurrently=True, if_not_exists=True)
    op.create_table(
        "reconcile_runs",
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("last_started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_success_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("listed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("recorded", sa.Integer(), server_default="0", nullable=False),
        sa.Column("runs", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("failures", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("provider", name=op.f("pk_reconcile_runs")),
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_events_reconciled", table_name="webhook_events")
    op.drop_table("reconcile_runs")
    op.drop_constraint("ck_webhook_events_received_via", "webhook_events", type_="check")
    op.drop_column("webhook_events", "received_via")
