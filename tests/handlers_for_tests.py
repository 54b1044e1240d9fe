"""Handlers the process tests load into real workers through WEBHOOK_HANDLERS."""

from __future__ import annotations

import os

import sqlalchemy as sa

from worker.handlers import JobContext, handler


@handler("stripe", "test.slow_credit")
def slow_credit(ctx: JobContext) -> str:
    """Writes, then holds the transaction open, so a test can kill the worker mid-way."""
    account = {"customer_id": ctx.payload["data"]["object"]["customer"], "currency": "usd"}
    ctx.conn.execute(sa.text("INSERT INTO accounts (customer_id, currency) VALUES "
                             "(:customer_id, :currency) ON CONFLICT DO NOTHING"), account)
    ctx.conn.execute(sa.text("UPDATE accounts SET balance = balance + 100 WHERE "
                             "customer_id = :customer_id AND currency = :currency"), account)
    seconds = float(os.environ.get("TEST_HANDLER_SLEEP", "0"))
    ctx.conn.execute(sa.text("SELECT pg_sleep(:s)"), {"s": seconds})
    return "credited slowly"
