"""WRONG: last write wins. Each subscription event upserts the subscription's id, status
and customer from data.object, whatever the order the events are applied in. In Stripe's
order the last event's status stays, as the reference has it; but deliveries come in any
order (a retry of `created` after `updated` was applied), and then an older status
overwrites a newer one. Fixed: subscription_status_fixed.py.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from tests.apps.kit._payloads import SUBSCRIPTION_TYPES, subscription
from webhooks import JobContext, handler

MIGRATIONS = Path(__file__).parent / "migrations" / "subscription_status"

metadata = sa.MetaData()
subscriptions = sa.Table(
    "kit_ss_subscriptions", metadata,
    sa.Column("subscription_id", sa.Text, nullable=False),
    sa.Column("customer_id", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("subscription_id", name="pk_kit_ss_subscriptions"),
)
METADATA = metadata

SubscriptionUpsert = sa.text("""
    INSERT INTO kit_ss_subscriptions (subscription_id, customer_id, status)
    VALUES (:subscription_id, :customer_id, :status)
    ON CONFLICT (subscription_id) DO UPDATE
        SET customer_id = EXCLUDED.customer_id, status = EXCLUDED.status
""")


@handler("stripe", *SUBSCRIPTION_TYPES)
def upsert_subscription(ctx: JobContext) -> str:
    sub = subscription(ctx)
    ctx.conn.execute(SubscriptionUpsert, {"subscription_id": sub.id,
                                          "customer_id": sub.customer, "status": sub.status})
    return "applied"
