"""The ingest against a DATABASE_URL of several hosts, and against a server that is no
longer the primary: a host that is down is skipped, and a read-only server's refusal is
a 503 (retried by the provider) whose connections are dropped, never a 500, and never a
pool that keeps answering from the demoted server once the primary is back."""

from __future__ import annotations

import dataclasses
import json

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from webhooks.ingest.app import create_app
from webhooks.shared import db
from webhooks.shared.settings import Settings


def deliver(client, event_id: str):  # type: ignore[no-untyped-def]
    body = json.dumps(factories.stripe_event("invoice.paid", factories.invoice(),
                                             event_id=event_id)).encode()
    return client.post("/webhooks/stripe", data=body, headers={
        "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})


def events(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM webhook_events")).scalar_one())


def libpq_url(settings: Settings, *hosts: str) -> str:
    """settings' database as a libpq URL naming these hosts, the primary's last."""
    url = sa.make_url(db.sqlalchemy_url(settings.database_url or ""))
    login = url.username + (f":{url.password}" if url.password else "") + "@"
    return (f"postgresql://{login}{','.join(hosts)}/{url.database}"
            "?target_session_attrs=read-write")


def test_a_host_that_is_down_is_skipped_for_the_primary(settings: Settings,
                                                        clean_db: Engine) -> None:
    url = sa.make_url(db.sqlalchemy_url(settings.database_url or ""))
    if not url.host or url.host.startswith("/"):
        pytest.skip("the test server listens on a unix socket only")
    down = f"127.0.0.1:{processes.free_port()}"
    several = dataclasses.replace(settings, database_url=libpq_url(
        settings, down, f"{url.host}:{url.port or 5432}"))
    client = create_app(several).test_client()
    assert deliver(client, "evt_hosts").status_code == 200
    assert events(clean_db) == 1


def test_a_read_only_server_is_a_503_and_its_connections_are_dropped(
        settings: Settings, clean_db: Engine) -> None:
    client = create_app(settings).test_client()
    assert deliver(client, "evt_before").status_code == 200  # a pooled connection now
    with clean_db.connect() as conn:
        name = conn.execute(sa.text("SELECT current_database()")).scalar_one()
        conn.execute(sa.text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
        conn.commit()
    try:
        # The pooled session predates the change: make it one that refuses writes, as a
        # pooler or a stale DNS name pointing at the demoted server gives.
        with clean_db.connect() as conn:
            conn.execute(sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'webhooks'"))
            conn.commit()
        refused = deliver(client, "evt_during")
        assert refused.status_code == 503 and refused.headers["Retry-After"]
    finally:
        with clean_db.connect() as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only'))
            conn.commit()
    # The primary is back: the same app, not restarted, records again.
    assert deliver(client, "evt_after").status_code == 200
    assert events(clean_db) == 2
