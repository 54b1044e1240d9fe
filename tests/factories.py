"""Row and event factories: Stripe-shaped events and direct inserts of events and jobs."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from webhooks.shared.models import EVENT_SEARCH_DOCUMENT

PROVIDER_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "providers"


def provider_fixture(provider: str, name: str) -> bytes:
    """A provider's published payload, as published (tests/fixtures/providers/SOURCES.md)."""
    return (PROVIDER_FIXTURES / provider / name).read_bytes()


def stripe_event(event_type: str, obj: dict[str, Any], *, event_id: str | None = None,
                 created: int | None = None) -> dict[str, Any]:
    return {
        "id": event_id or f"evt_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "type": event_type,
        "created": created if created is not None else int(time.time()),
        "data": {"object": obj},
    }


def invoice(invoice_id: str | None = None, *, customer: str = "cus_1", amount: int = 1000,
            currency: str = "usd", email: str | None = "buyer@example.com") -> dict[str, Any]:
    return {"id": invoice_id or f"in_{uuid.uuid4().hex[:16]}", "object": "invoice",
            "customer": customer, "amount_paid": amount, "amount_due": amount,
            "currency": currency, "customer_email": email}


def charge(charge_id: str, *, customer: str = "cus_1", refunded: int,
           currency: str = "usd") -> dict[str, Any]:
    return {"id": charge_id, "object": "charge", "customer": customer,
            "amount_refunded": refunded, "currency": currency}


def subscription(sub_id: str, status: str, *, customer: str = "cus_1") -> dict[str, Any]:
    return {"id": sub_id, "object": "subscription", "customer": customer, "status": status}


def stripe_signature(body: bytes, secret: str, timestamp: int | None = None) -> str:
    """The documented Stripe scheme, written independently of the code under test."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def insert_event_and_job(engine: Engine, event: dict[str, Any], provider: str = "stripe",
                         source: str | None = None, **job: Any) -> int:
    """Insert an event row and its job directly (no broker message), pending unless `job`
    says otherwise; source None: the provider's default source. A job that has run (a
    status other than pending, or attempts) has its event's search document, as the
    worker writes it in the job's transaction (shared/queries.py); a pending one not."""
    key = {"p": provider, "s": source or provider, "e": event["id"],
           "t": event.get("type", "unknown")}
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO webhook_events (provider, source, event_id, event_type, payload) "
                    "VALUES (:p, :s, :e, :t, CAST(:payload AS jsonb))"),
            {**key, "payload": json.dumps(event)},
        )
        columns = ", ".join(["provider", "source", "event_id", "event_type", *job])
        values = ", ".join([":p", ":s", ":e", ":t", *(f":{k}" for k in job)])
        job_id: int = conn.execute(
            sa.text(f"INSERT INTO jobs ({columns}) VALUES ({values}) RETURNING id"),
            {**key, **job},
        ).scalar_one()
        if job.get("status", "pending") != "pending" or job.get("attempts"):
            index_for_search(conn, job_id)
    return job_id


def index_for_search(conn: sa.Connection, job_id: int) -> None:
    """The search document of the job's event, as the worker's marking statements write it."""
    conn.execute(sa.text(f"""
        INSERT INTO event_search (provider, source, event_id, received_at, document)
        SELECT e.provider, e.source, e.event_id, e.received_at, {EVENT_SEARCH_DOCUMENT}
        FROM webhook_events e JOIN jobs j USING (provider, source, event_id)
        WHERE j.id = :id AND j.created_at = e.received_at
        ON CONFLICT DO NOTHING
    """), {"id": job_id})
