"""Handlers the process tests load into real workers through WEBHOOK_HANDLERS."""

from __future__ import annotations

import os

import sqlalchemy as sa

from webhooks import JobContext, handler

# +100 usd as the reference ledger books money (an entry, and the balance moved by it), so
# that `webhooks audit` holds on the databases these tests leave. The entry's key is this
# transaction's, not a business key: nothing but the job's own exactly-once stops a second
# application, which would book a second entry and show in the balance.
CREDIT = sa.text("""
    WITH account AS (
        INSERT INTO accounts (customer_id, currency, balance)
        VALUES (:customer_id, 'usd', 100)
        ON CONFLICT (customer_id, currency) DO UPDATE
            SET balance = accounts.balance + 100, updated_at = now()
        RETURNING 1
    )
    INSERT INTO ledger_entries
        (customer_id, currency, amount, provider, event_id, entry_key, kind, reference)
    SELECT :customer_id, 'usd', 100, :provider, :event_id,
           'test:' || :event_id || ':' || pg_current_xact_id(), 'test', :event_id
    FROM account
""")


@handler("stripe", "test.slow_credit")
def slow_credit(ctx: JobContext) -> str:
    """Writes, then holds the transaction open, so a test can kill the worker mid-way."""
    ctx.conn.execute(CREDIT, {"customer_id": ctx.payload["data"]["object"]["customer"],
                              "provider": ctx.provider, "event_id": ctx.event_id})
    seconds = float(os.environ.get("TEST_HANDLER_SLEEP", "0"))
    ctx.conn.execute(sa.text("SELECT pg_sleep(:s)"), {"s": seconds})
    return "credited slowly"


@handler("stripe", "test.poison")
def poison(ctx: JobContext) -> str:
    """Raises on every attempt: its job fails once JOB_MAX_ATTEMPTS are spent."""
    raise RuntimeError(f"poison event {ctx.event_id}: this handler always fails")


@handler("shopify", "orders/create", "orders/paid")
def order_topic(ctx: JobContext) -> str:
    """Names the topic it ran for: Shopify's two topics of one order body are two events."""
    return f"{ctx.event_type} of order {ctx.payload['id']}"
