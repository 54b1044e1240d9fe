"""A handler the console's browser tests load into a real worker (WEBHOOK_HANDLERS): it
fails until the file named by CONSOLE_TEST_FLAG exists (the operator's "fix"), then
credits the invoice's amount once, as a payments handler would."""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa

from webhooks import JobContext, handler

ACCOUNT = sa.text("INSERT INTO accounts (customer_id, currency) VALUES (:customer, :currency) "
                  "ON CONFLICT DO NOTHING")
ENTRY = sa.text("""
    INSERT INTO ledger_entries (customer_id, currency, amount, provider, event_id, entry_key,
                                kind, reference)
    VALUES (:customer, :currency, :amount, :provider, :event_id, :key, 'credit', :invoice)
    ON CONFLICT (entry_key) DO NOTHING RETURNING id""")
BALANCE = sa.text("UPDATE accounts SET balance = balance + :amount "
                  "WHERE customer_id = :customer AND currency = :currency")


@handler("stripe", "test.console_credit")
def credit_once_allowed(ctx: JobContext) -> str:
    flag = Path(os.environ["CONSOLE_TEST_FLAG"])
    if not flag.exists():
        raise RuntimeError(f"ledger closed for maintenance: {flag.name} not found")
    invoice = ctx.payload["data"]["object"]
    row = {"customer": invoice["customer"], "currency": invoice["currency"],
           "amount": invoice["amount_paid"], "provider": ctx.provider,
           "event_id": ctx.event_id, "key": f"credit:{invoice['id']}", "invoice": invoice["id"]}
    ctx.conn.execute(ACCOUNT, row)
    if ctx.conn.execute(ENTRY, row).first() is not None:
        ctx.conn.execute(BALANCE, row)
    return f"credited {invoice['amount_paid']} {invoice['currency']}"
