"""calls: the calls handlers queue to other APIs (ctx.queue_call), made once each

One row per call, keyed by the handler's key (UNIQUE), sent by the worker's call dispatch
after its job commits with `idempotency_key` as the target's key; `first_attempt_at`
starts the key's lifetime at the target. Two notification kinds join the vocabulary:
`call.failed` and `call.ambiguous`. A new, empty table and a CHECK replaced on
notifications (a scan of that table, small): nothing else waits.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 01:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KINDS = ("job.failed", "provider.failing", "provider.recovered", "email.failed",
         "reconcile.found", "reconcile.failing", "database.failover",
         "stripe.event_generation_failed", "audit.violation")
CALL_KINDS = ("call.failed", "call.ambiguous")


def _kinds(kinds: Sequence[str]) -> str:
    return f"kind IN ({', '.join(repr(kind) for kind in kinds)})"


def upgrade() -> None:
    op.create_table(
        "calls",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("method", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("params", postgresql.JSONB(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("provider", sa.Text()),
        sa.Column("event_id", sa.Text()),
        sa.Column("source", sa.Text()),
        sa.Column("account", sa.Text()),
        sa.Column("status", sa.Text(), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("first_attempt_at", sa.DateTime(timezone=True)),
        sa.Column("run_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.Column("response_status", sa.Integer()),
        sa.Column("response", postgresql.JSONB()),
        sa.Column("last_error", sa.Text()),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("id", name="pk_calls"),
        sa.UniqueConstraint("key", name="uq_calls_key"),
        sa.CheckConstraint("status IN ('pending', 'sent', 'failed', 'ambiguous')",
                           name="ck_calls_status"),
    )
    op.create_index("ix_calls_pending_run_at_id", "calls", ["run_at", "id"],
                    postgresql_where=sa.text("status = 'pending'"))
    op.create_index("ix_calls_unsettled_id", "calls", ["id"],
                    postgresql_where=sa.text("status IN ('failed', 'ambiguous')"))
    op.drop_constraint("ck_notifications_kind", "notifications", type_="check")
    op.create_check_constraint("ck_notifications_kind", "notifications",
                               _kinds(KINDS + CALL_KINDS))


def downgrade() -> None:
    op.execute(f"DELETE FROM notifications WHERE kind IN {CALL_KINDS!r}")
    op.drop_constraint("ck_notifications_kind", "notifications", type_="check")
    op.create_check_constraint("ck_notifications_kind", "notifications", _kinds(KINDS))
    op.drop_table("calls")
