"""Shared by the console's tests: credentials, rows in the states the console acts on, and
the CSRF token read from a page as a browser would."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories

USER = "admin"
PASSWORD = "correct horse battery staple"
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def basic(user: str = USER, password: str = PASSWORD) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


def token_in(html: str) -> str:
    found = TOKEN.search(html)
    assert found, "no CSRF token on the page"
    return found.group(1)


def failed_event(engine: Engine, event: dict[str, Any] | None = None,
                 error: str = "RuntimeError: boom", provider: str = "stripe") -> int:
    """An event whose job failed: returns the job id."""
    event = event or factories.stripe_event("invoice.paid", factories.invoice())
    return factories.insert_event_and_job(engine, event, provider, status="failed",
                                          attempts=3, last_error=error)


def done_event(engine: Engine, event: dict[str, Any] | None = None) -> int:
    event = event or factories.stripe_event("invoice.paid", factories.invoice())
    return factories.insert_event_and_job(engine, event, status="done", attempts=1,
                                          outcome="credited")


def job(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT status, attempts, last_error FROM jobs "
                                    "WHERE id = :id"), {"id": job_id}).one()


def email(engine: Engine, key: str, status: str, *, event: tuple[str, str] | None = None,
          message_id: str | None = None) -> int:
    provider, event_id = event or (None, None)
    with engine.begin() as conn:
        email_id: int = conn.execute(sa.text("""
            INSERT INTO outbox (idempotency_key, kind, status, to_address, subject, text_body,
                                html_body, provider, event_id, attempts, last_error, message_id)
            VALUES (:key, 'receipt', :status, 'buyer@example.com', 'Receipt', 'text', 'html',
                    :provider, :event_id, 3, :error, :message_id)
            RETURNING id"""), {
            "key": key, "status": status, "provider": provider, "event_id": event_id,
            "error": "EmailRejected: inactive recipient" if status == "failed" else None,
            "message_id": message_id}).scalar_one()
    return email_id


def email_row(engine: Engine, email_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT status, idempotency_key FROM outbox WHERE id = :id"),
                            {"id": email_id}).one()


def payload_json(value: Any) -> str:
    return json.dumps(value)
