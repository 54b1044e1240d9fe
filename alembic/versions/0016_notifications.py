"""notifications: the operational events recorded for people (notifications), one
delivery per channel (notification_deliveries), the coalescing windows
(notification_windows), each source's failing state (notification_health), and the
failed runs in a row of a reconciled source (reconcile_runs.failures_in_a_row)

New tables, and a column with a constant default on a small table (metadata only in
Postgres 11 and later): nothing here scans or rewrites a table the ingest writes.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 07:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KINDS = ("job.failed", "provider.failing", "provider.recovered", "email.failed",
         "reconcile.found", "reconcile.failing", "database.failover",
         "stripe.event_generation_failed", "audit.violation")
STATUSES = ("pending", "sent", "failed")
CHANNELS = ("slack", "email", "webhook")


def _one_of(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


def upgrade() -> None:
    now = sa.text("now()")
    op.create_table(
        "notifications",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("provider", sa.Text()),
        sa.Column("source", sa.Text()),
        sa.Column("count", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.Column("status", sa.Text(), nullable=False, server_default="pending"),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.Column("sealed", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("details", JSONB(), nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("sent_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("id", name="pk_notifications"),
        sa.CheckConstraint(_one_of("kind", KINDS), name="ck_notifications_kind"),
        sa.CheckConstraint(_one_of("status", STATUSES), name="ck_notifications_status"),
        sa.CheckConstraint("count >= 1", name="ck_notifications_count"),
    )
    op.create_index("ix_notifications_created_at_id", "notifications", ["created_at", "id"])
    op.create_table(
        "notification_deliveries",
        sa.Column("notification_id", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False, server_default="pending"),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("run_at", sa.DateTime(timezone=True), nullable=False, server_default=now),
        sa.Column("last_error", sa.Text()),
        sa.Column("sent_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("notification_id", "channel",
                                name="pk_notification_deliveries"),
        sa.ForeignKeyConstraint(["notification_id"], ["notifications.id"], ondelete="CASCADE",
                                name="fk_notification_deliveries_notification_id_notifications"),
        sa.CheckConstraint(_one_of("channel", CHANNELS),
                           name="ck_notification_deliveries_channel"),
        sa.CheckConstraint(_one_of("status", STATUSES), name="ck_notification_deliveries_status"),
    )
    op.create_index("ix_notification_deliveries_pending_run_at", "notification_deliveries",
                    ["run_at"], postgresql_where=sa.text("status = 'pending'"))
    op.create_table(
        "notification_windows",
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("closes_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tail_id", sa.Text()),
        sa.PrimaryKeyConstraint("kind", "provider", "source", name="pk_notification_windows"),
    )
    op.create_table(
        "notification_health",
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("window_started_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=now),
        sa.Column("failed_attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("failing", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.PrimaryKeyConstraint("provider", "source", name="pk_notification_health"),
    )
    op.create_index("ix_notification_health_failing", "notification_health",
                    ["provider", "source"], postgresql_where=sa.text("failing"))
    op.add_column("reconcile_runs", sa.Column("failures_in_a_row", sa.Integer(),
                                              nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("reconcile_runs", "failures_in_a_row")
    op.drop_table("notification_health")
    op.drop_table("notification_windows")
    op.drop_table("notification_deliveries")
    op.drop_table("notifications")
