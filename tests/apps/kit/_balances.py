"""The audit both unkeyed_increment apps register (each on its own balances table): each
customer's balance is the sum of amount_paid over the distinct invoices of its
`invoice.paid` / `invoice.payment_succeeded` events whose job is done (the core's
webhook_events and jobs). Registers nothing itself, so it belongs to no app."""

from __future__ import annotations

from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from webhooks import Finding

# One row per invoice (its first event's customer and amount: both events carry the
# same), summed per customer, beside the customer's balance row: a customer on one side
# only counts 0 on the other. Every event, whatever `since`: a balance is its whole history.
_BALANCE_MISMATCH = """
    WITH paid AS (
        SELECT DISTINCT ON (e.payload #>> '{{data,object,id}}')
               e.payload #>> '{{data,object,customer}}' AS customer_id,
               (e.payload #>> '{{data,object,amount_paid}}')::numeric AS amount_paid
        FROM webhook_events e JOIN jobs j USING (provider, source, event_id)
        WHERE e.provider = 'stripe'
          AND e.event_type IN ('invoice.paid', 'invoice.payment_succeeded')
          AND j.status = 'done'
          AND jsonb_typeof(e.payload #> '{{data,object,customer}}') = 'string'
          AND jsonb_typeof(e.payload #> '{{data,object,amount_paid}}') = 'number'
        ORDER BY e.payload #>> '{{data,object,id}}', e.id
    ), expected AS (
        SELECT customer_id, sum(amount_paid) AS expected FROM paid GROUP BY customer_id
    )
    SELECT customer_id, coalesce(x.expected, 0) AS expected, b.balance
    FROM expected x FULL JOIN {table} b USING (customer_id)
    WHERE coalesce(b.balance, 0) <> coalesce(x.expected, 0)
    ORDER BY customer_id
"""


def mismatches(conn: Connection, table: str) -> Iterator[Finding]:
    for row in conn.execute(sa.text(_BALANCE_MISMATCH.format(table=table))):
        balance = "no balance row" if row.balance is None else f"balance {row.balance}"
        yield Finding(f"customer {row.customer_id}: {balance}, its distinct paid invoices "
                      f"total {row.expected}", {table: {"customer_id": row.customer_id}})
