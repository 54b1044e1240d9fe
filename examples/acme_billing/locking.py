"""Acme's lock key for Stripe, an app of its own: name it only where the reference app
does not run (`WEBHOOK_HANDLERS=acme_billing,acme_billing.locking`).

A provider has one lock key among the apps that run (two, and every process exits 1
naming both), and the reference app, `webhooks.ledger`, has Stripe's: the customer of
data.object, ordered by customer, currency and object id. Beside it, that key serves this
app too (its rows are per invoice, and an invoice is its customer's). Alone, this one
does the same: a batch runs its jobs in (customer, invoice) order and try-locks each
customer, so two batches never hold rows of one customer's invoices in opposite orders.
`acme_billing` does not import this module: named alone, it runs with no Stripe lock key
(jobs in id order, no try-lock; a rare deadlock between batches is rolled back by
Postgres and its jobs run again, one at a time).
"""

from __future__ import annotations

from typing import Any

from webhooks import LockKey, lock_key

from .hooks import PROVIDER, data_object


@lock_key(PROVIDER)
def by_customer(payload: Any) -> LockKey | None:
    obj = data_object(payload)
    if obj is None:
        return None
    customer, object_id = str(obj.get("customer") or ""), str(obj.get("id") or "")
    return LockKey(customer or object_id, (customer, object_id))
