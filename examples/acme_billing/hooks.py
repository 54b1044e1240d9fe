"""Acme's hooks: what `webhooks show` and the console show of an invoice event's effect,
and what `webhooks audit` checks. Imports only `webhooks`, SQLAlchemy and the app's
tables: the console and `webhooks show` import it without any of the workers' code.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from webhooks import Column, Event, Finding, Section, audit_check, effects

from .tables import paid_invoices

PROVIDER = "stripe"
INVOICE_TYPES = ("invoice.paid", "invoice.payment_succeeded")  # one payment sends both


def data_object(payload: Any) -> dict[str, Any] | None:
    """The event's data.object, or None (a payload that is not an object, or has none)."""
    data = payload.get("data") if isinstance(payload, dict) else None
    obj = data.get("object") if isinstance(data, dict) else None
    return obj if isinstance(obj, dict) else None


PAID_INVOICE = Section(
    key="acme_paid_invoice", title="Acme: paid invoice", label="acme", single=True,
    columns=(Column("invoice_id", "Invoice", "mono"), Column("customer_id", "Customer", "mono"),
             Column("amount_paid", "Amount", "num"), Column("currency", "Currency"),
             Column("event_id", "Recorded by", "mono"), Column("recorded_at", "At", "time")),
    text="{invoice_id} of {customer_id}: {amount_paid} {currency} "
         "(recorded by {event_id} at {recorded_at})",
)


@effects(PROVIDER)
def paid_invoice(conn: Connection, event: Event) -> list[Section]:
    """An invoice event's row (recorded by it or by the invoice's other event); nothing for
    other types."""
    obj = data_object(event.payload)
    if event.event_type not in INVOICE_TYPES or obj is None:
        return []
    p = paid_invoices.c
    row = conn.execute(sa.select(p.invoice_id, p.customer_id, p.amount_paid, p.currency,
                                 p.event_id, p.recorded_at)
                       .where(p.invoice_id == str(obj.get("id")))).first()
    return [PAID_INVOICE.with_rows([dict(row._mapping)] if row else [])]


# The paid invoices of done jobs (the core's webhook_events and jobs, SPEC "Data model")
# without their one row of their amount_paid. Doubles cannot be: the primary key. `:since`:
# the invoices with an event received since then (None: all).
PaidInvoiceMissing = sa.text("""
    WITH paid AS (
        SELECT DISTINCT e.payload #>> '{data,object,id}' AS invoice_id,
               (e.payload #>> '{data,object,amount_paid}')::numeric AS amount_paid
        FROM webhook_events e JOIN jobs j USING (provider, source, event_id)
        WHERE e.provider = 'stripe'
          AND e.event_type IN ('invoice.paid', 'invoice.payment_succeeded')
          AND j.status = 'done'
          AND jsonb_typeof(e.payload #> '{data,object,amount_paid}') = 'number'
          AND (CAST(:since AS timestamptz) IS NULL OR e.received_at >= :since)
    )
    SELECT p.invoice_id, p.amount_paid, a.amount_paid AS recorded
    FROM paid p LEFT JOIN acme_paid_invoices a USING (invoice_id)
    WHERE a.invoice_id IS NULL OR a.amount_paid <> p.amount_paid
    ORDER BY p.invoice_id
""")


@audit_check(PROVIDER, "acme paid invoices")
def paid_invoices_recorded(conn: Connection, since: datetime | None) -> Iterator[Finding]:
    """Each invoice event whose job is done left its invoice's row, of its amount_paid."""
    for row in conn.execute(PaidInvoiceMissing, {"since": since}):
        found = "no row" if row.recorded is None else f"a row of {row.recorded}"
        yield Finding(f"invoice {row.invoice_id}: paid {row.amount_paid}, {found}",
                      {"acme_paid_invoices": {"invoice_id": row.invoice_id}})
