"""The ledger's hooks (shared.hooks): the lock key of a Stripe payload, the effects of a
Stripe event, and the audit checks of what the handlers leave behind. Imports only shared/
and the ledger's tables: the console and `webhooks show` load it without worker/.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from webhooks import Column, Event, Finding, LockKey, Section, audit_check, effects, lock_key
from webhooks.ledger.tables import ledger_entries, subscriptions
from webhooks.shared.models import JobStatus
from webhooks.shared.providers.stripe import LIVEMODE_REFUSED

PROVIDER = "stripe"


def data_object(payload: Any) -> dict[str, Any] | None:
    """The event's data.object, or None (a payload that is not an object, or has none)."""
    data = payload.get("data") if isinstance(payload, dict) else None
    obj = data.get("object") if isinstance(data, dict) else None
    return obj if isinstance(obj, dict) else None


@lock_key(PROVIDER)
def customer_first(payload: Any) -> LockKey:
    """The customer, currency and id of data.object: the account, and the subscription,
    invoice or charge rows the handlers lock, in that order. The try-lock is the customer's
    (the account), or else the object's."""
    obj = data_object(payload)
    if obj is None:
        return LockKey("", ("", "", ""))
    customer = str(obj.get("customer") or "")
    currency = str(obj.get("currency") or "").lower()
    object_id = str(obj.get("id") or "")
    return LockKey(customer or object_id, (customer, currency, object_id))


LEDGER = Section(
    key="ledger_entries", title="Ledger entries", label="ledger", row_class="ledger-entry",
    columns=(Column("customer_id", "Customer", "mono"), Column("currency", "Currency"),
             Column("amount", "Amount", "num"), Column("kind", "Kind"),
             Column("reference", "Reference", "mono"), Column("entry_key", "Key", "mono"),
             Column("created_at", "At", "time")),
    text="{amount:+d} {currency} {customer_id}  {kind} {reference}  ({entry_key})",
)
SUBSCRIPTION = Section(
    key="subscription", title="Subscription", label="subscription", single=True,
    columns=(Column("subscription_id", "Id", "mono"), Column("customer_id", "Customer", "mono"),
             Column("status", "Status"), Column("last_event_id", "Last event", "mono"),
             Column("updated_at", "Updated", "time")),
    text="{subscription_id} of {customer_id}: {status} (last event {last_event_id}, "
         "updated {updated_at})",
)


@effects(PROVIDER)
def ledger_and_subscription(conn: Connection, event: Event) -> list[Section]:
    """The ledger entries the event booked, and the subscription it last set (or the one
    its data.object is)."""
    return [LEDGER.with_rows(_entries(conn, event)),
            SUBSCRIPTION.with_rows(_subscription(conn, event))]


def _entries(conn: Connection, event: Event) -> list[dict[str, Any]]:
    e = ledger_entries.c
    rows = conn.execute(sa.select(e.customer_id, e.currency, e.amount, e.kind, e.reference,
                                  e.entry_key, e.created_at)
                        .where(e.provider == event.provider, e.event_id == event.event_id)
                        .order_by(e.id))
    return [dict(row._mapping) for row in rows]


def _subscription(conn: Connection, event: Event) -> list[dict[str, Any]]:
    s = subscriptions.c
    obj = data_object(event.payload)
    object_id = obj.get("id") if obj is not None else None
    condition = s.last_event_id == event.event_id
    if isinstance(object_id, str) and event.event_type.startswith("customer.subscription."):
        condition = sa.or_(condition, s.subscription_id == object_id)
    row = conn.execute(sa.select(s.subscription_id, s.customer_id, s.status,
                                 s.last_event_id, s.updated_at).where(condition)).first()
    return [dict(row._mapping)] if row else []


# Accounts whose balance is not the sum of their entries: LedgerBook moves the balance by
# the entry it inserts, in one statement, so the two never differ.
AccountBalanceMismatch = sa.text("""
    SELECT a.customer_id, a.currency, a.balance, coalesce(sum(e.amount), 0) AS entries
    FROM accounts a
    LEFT JOIN ledger_entries e USING (customer_id, currency)
    GROUP BY a.customer_id, a.currency, a.balance
    HAVING a.balance <> coalesce(sum(e.amount), 0)
    ORDER BY a.customer_id, a.currency
""")

# A done job that applied its event: not one whose event's livemode its source refused
# (a Connect endpoint's test-mode event at a live-only source is done with no effect).
NOT_REFUSED = f"AND coalesce(j.outcome, '') NOT LIKE '{LIVEMODE_REFUSED}%'"

# Stripe's events that carry a paid invoice, and where each names it: a snapshot event's
# data.object, a thin event's related_object (its job fetched the invoice).
INVOICE_EVENT_TYPES = ("invoice.paid", "invoice.payment_succeeded", "v1.invoice.paid")
SNAPSHOT_INVOICE_TYPES = ("invoice.paid", "invoice.payment_succeeded")
THIN_INVOICE_TYPE = "v1.invoice.paid"

# The paid invoices with a customer and an amount (credit_invoice's condition) of done jobs
# (NOT_REFUSED) whose entries are not one entry of amount_paid. An invoice's entries are
# counted by the invoice, not by the key the handler chose: the entries of its key
# `invoice:<id>`, and every entry booked by an event that names the invoice in its payload,
# whatever key it carries (a second credit under another key, booked by the invoice's
# other event, is two entries: the audit must not trust the handler it checks).
# `:since`: invoices with an event recorded since then. OFFSET 0 keeps the innermost
# subquery apart (the planner would inline it): each event's payload is read once (one
# expression of it), not once for every field a condition reads (a stored payload is
# compressed, TOASTed; benchmarks/audit.py, --explain), and the events' CTE keeps only
# the few fields the rest reads.
InvoiceCreditMismatch = sa.text(f"""
    WITH invoice_events AS (
        SELECT o.event_id, o.event_type, o.received_at, o.applied, o.obj ->> 'id' AS invoice_id,
               CASE WHEN jsonb_typeof(o.obj -> 'customer') = 'string'
                     AND jsonb_typeof(o.obj -> 'amount_paid') = 'number'
                    THEN (o.obj ->> 'amount_paid')::numeric END AS amount_paid
        FROM (SELECT e.event_id, e.event_type, e.received_at,
                     j.status = '{JobStatus.DONE}' {NOT_REFUSED} AS applied,
                     CASE WHEN e.event_type = '{THIN_INVOICE_TYPE}'
                          THEN e.payload -> 'related_object'
                          ELSE e.payload #> '{{data,object}}' END AS obj
              FROM webhook_events e JOIN jobs j USING (provider, source, event_id)
              WHERE e.provider = '{PROVIDER}' AND e.event_type IN {INVOICE_EVENT_TYPES!r}
              OFFSET 0) AS o
    ), paid AS (
        SELECT invoice_id, amount_paid, max(received_at) AS received_at
        FROM invoice_events
        WHERE applied AND event_type IN {SNAPSHOT_INVOICE_TYPES!r} AND amount_paid > 0
        GROUP BY 1, 2
    ), entries AS (
        SELECT p.invoice_id, l.id, l.amount
        FROM paid p JOIN ledger_entries l ON l.entry_key = 'invoice:' || p.invoice_id
        UNION
        SELECT i.invoice_id, l.id, l.amount
        FROM invoice_events i
        JOIN ledger_entries l ON l.provider = '{PROVIDER}' AND l.event_id = i.event_id
    )
    SELECT p.invoice_id, p.amount_paid, count(n.id) AS entries,
           coalesce(sum(n.amount), 0) AS credited
    FROM paid p LEFT JOIN entries n USING (invoice_id)
    WHERE CAST(:since AS timestamptz) IS NULL OR p.received_at >= :since
    GROUP BY p.invoice_id, p.amount_paid
    HAVING count(n.id) <> 1 OR coalesce(sum(n.amount), 0) <> p.amount_paid
    ORDER BY p.invoice_id
""")

# The refunded charges with a customer (debit_refund's condition) whose refund entries do
# not total the largest amount_refunded of their done events. `:since`: charges with an
# event recorded since then. OFFSET 0: as for InvoiceCreditMismatch.
RefundTotalMismatch = sa.text(f"""
    WITH refunded AS (
        SELECT o.obj ->> 'id' AS charge_id,
               max((o.obj ->> 'amount_refunded')::numeric) AS refunded,
               max(o.received_at) AS received_at
        FROM (SELECT e.payload #> '{{data,object}}' AS obj, e.received_at
              FROM webhook_events e JOIN jobs j USING (provider, source, event_id)
              WHERE e.provider = '{PROVIDER}' AND e.event_type = 'charge.refunded'
                AND j.status = '{JobStatus.DONE}' {NOT_REFUSED}
              OFFSET 0) AS o
        WHERE jsonb_typeof(o.obj -> 'customer') = 'string'
          AND jsonb_typeof(o.obj -> 'amount_refunded') = 'number'
        GROUP BY 1
    )
    SELECT r.charge_id, r.refunded, coalesce(-sum(l.amount), 0) AS debited
    FROM refunded r
    LEFT JOIN ledger_entries l ON l.kind = 'refund' AND l.reference = r.charge_id
    WHERE CAST(:since AS timestamptz) IS NULL OR r.received_at >= :since
    GROUP BY r.charge_id, r.refunded
    HAVING coalesce(-sum(l.amount), 0) <> r.refunded
    ORDER BY r.charge_id
""")


@audit_check(PROVIDER, "account balances")
def account_balances(conn: Connection, since: datetime | None) -> Iterator[Finding]:
    """Each account's balance equals the sum of its entries (every account: a balance is
    the whole history's)."""
    for row in conn.execute(AccountBalanceMismatch):
        yield Finding(f"account {row.customer_id} {row.currency}: balance {row.balance}, "
                      f"its entries total {row.entries}",
                      {"accounts": {"customer_id": row.customer_id, "currency": row.currency}})


@audit_check(PROVIDER, "invoice credits")
def invoice_credits(conn: Connection, since: datetime | None) -> Iterator[Finding]:
    """Each paid invoice (done job, a customer, amount_paid > 0) has exactly one ledger
    entry, of its amount_paid, counting every entry its events booked, whatever its key."""
    for row in conn.execute(InvoiceCreditMismatch, {"since": since}):
        yield Finding(f"invoice {row.invoice_id}: paid {row.amount_paid}, "
                      f"{row.entries} ledger entries of {row.credited} in total",
                      {"ledger_entries": {"entry_key": f"invoice:{row.invoice_id}"}})


@audit_check(PROVIDER, "refund totals")
def refund_totals(conn: Connection, since: datetime | None) -> Iterator[Finding]:
    """Each refunded charge (done job, a customer) is debited its amount_refunded in total."""
    for row in conn.execute(RefundTotalMismatch, {"since": since}):
        yield Finding(f"charge {row.charge_id}: refunded {row.refunded}, "
                      f"debited {row.debited}",
                      {"ledger_entries": {"kind": "refund", "reference": row.charge_id}})
