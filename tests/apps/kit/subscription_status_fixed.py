"""FIXED subscription_status: the row keeps the `created` of the event that wrote it, and
an event updates it only if it is not older (`WHERE EXCLUDED.event_created >=
kit_ssf_subscriptions.event_created`, the reference app's guard, webhooks/ledger/
handlers.py SubscriptionUpsert). Whatever the order, the row ends at the latest event's
status; two events of one subscription in concurrent transactions queue on the row (the
second's ON CONFLICT waits for the first, then compares with what it committed).
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from tests.apps.kit._payloads import SUBSCRIPTION_TYPES, subscription
from webhooks import JobContext, handler

MIGRATIONS = Path(__file__).parent / "migrations" / "subscription_status_fixed"

metadata = sa.MetaData()
subscriptions = sa.Table(
    "kit_ssf_subscriptions", metadata,
    sa.Column("subscription_id", sa.Text, nullable=False),
    sa.Column("customer_id", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("event_created", sa.BigInteger, nullable=False),  # the applied event's
    sa.PrimaryKeyConstraint("subscription_id", name="pk_kit_ssf_subscriptions"),
)
METADATA = metadata

SubscriptionUpsert = sa.text("""
    INSERT INTO kit_ssf_subscriptions (subscription_id, customer_id, status, event_created)
    VALUES (:subscription_id, :customer_id, :status, :created)
    ON CONFLICT (subscription_id) DO UPDATE
        SET customer_id = EXCLUDED.customer_id, status = EXCLUDED.status,
            event_created = EXCLUDED.event_created
        WHERE EXCLUDED.event_created >= kit_ssf_subscriptions.event_created
    RETURNING subscription_id
""")


@handler("stripe", *SUBSCRIPTION_TYPES)
def upsert_subscription(ctx: JobContext) -> str:
    sub = subscription(ctx)
    applied = ctx.fetch(SubscriptionUpsert, {"subscription_id": sub.id,
                                             "customer_id": sub.customer,
                                             "status": sub.status, "created": sub.created})
    return "applied" if applied is not None else "stale, skipped"
