"""The ingest against a real Postgres: statuses, dedup, one transaction, 503."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from webhooks.ingest.app import create_app
from webhooks.shared.settings import Settings


def count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


@pytest.fixture()
def client(settings: Settings, clean_db: Engine):  # type: ignore[no-untyped-def]
    app = create_app(settings)
    return app.test_client()


def post(client, body: bytes, signature: str | None = None, provider: str = "stripe",
         **headers: str):  # type: ignore[no-untyped-def]
    if signature is None:
        signature = factories.stripe_signature(body, STRIPE_SECRET)
    return client.post(f"/webhooks/{provider}", data=body,
                       headers={"Stripe-Signature": signature, **headers})


def event_body(**kwargs) -> bytes:  # type: ignore[no-untyped-def]
    event = factories.stripe_event("invoice.paid", factories.invoice(), **kwargs)
    return json.dumps(event).encode()


def test_new_event_writes_event_and_job(client, clean_db) -> None:  # type: ignore[no-untyped-def]
    body = event_body(event_id="evt_new")
    response = post(client, body)
    assert response.status_code == 200
    assert response.json == {"event_id": "evt_new", "duplicate": False, "status": "pending"}
    assert count(clean_db, "webhook_events") == 1
    assert count(clean_db, "jobs") == 1
    with clean_db.connect() as conn:
        row = conn.execute(
            sa.text("SELECT provider, event_type, payload FROM webhook_events")
        ).one()
    assert row.provider == "stripe" and row.event_type == "invoice.paid"
    assert row.payload["id"] == "evt_new"


def test_duplicate_answers_job_status_and_is_counted(client, clean_db) -> None:  # type: ignore
    body = event_body(event_id="evt_dup")
    assert post(client, body).json["duplicate"] is False
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'done'"))
    second = post(client, body)
    assert second.status_code == 200
    assert second.json == {"event_id": "evt_dup", "duplicate": True, "status": "done"}
    assert count(clean_db, "webhook_events") == 1
    assert count(clean_db, "jobs") == 1
    assert count(clean_db, "webhook_duplicates") == 1


@pytest.mark.parametrize(
    ("signature", "reason"),
    [
        ("", "missing"),
        ("garbage", "malformed"),
        ("t=notanumber,v1=abc", "malformed timestamp"),
        (None, "wrong secret"),
    ],
)
def test_bad_signatures_are_400_and_write_nothing(client, clean_db, signature, reason) -> None:  # type: ignore[no-untyped-def]
    body = event_body()
    if reason == "wrong secret":
        signature = factories.stripe_signature(body, "whsec_other")
    response = client.post("/webhooks/stripe", data=body,
                           headers={"Stripe-Signature": signature} if signature else {})
    assert response.status_code == 400, reason
    assert count(clean_db, "webhook_events") == 0


def test_tampered_body_is_400(client, clean_db) -> None:  # type: ignore[no-untyped-def]
    body = event_body()
    signature = factories.stripe_signature(body, STRIPE_SECRET)
    assert post(client, body.replace(b"1000", b"9000"), signature).status_code == 400
    assert count(clean_db, "webhook_events") == 0


# +302, not +301: the signed timestamp is int(time.time()) + offset, up to a second less
# than now + offset, and a little time passes before the check.
@pytest.mark.parametrize("offset", [-301, 302, -100000, 100000])
def test_timestamps_outside_tolerance_are_400(client, clean_db, offset) -> None:  # type: ignore[no-untyped-def]
    body = event_body()
    signature = factories.stripe_signature(body, STRIPE_SECRET, int(time.time()) + offset)
    assert post(client, body, signature).status_code == 400
    assert count(clean_db, "webhook_events") == 0


def test_two_v1_values_and_rotated_secrets(settings, clean_db) -> None:  # type: ignore[no-untyped-def]
    rotated = Settings.from_env({"DATABASE_URL": settings.database_url or "",
                                 "BROKER_URL": settings.broker_url or "",
                                 "STRIPE_WEBHOOK_SECRET": "whsec_old, whsec_new"})
    client = create_app(rotated).test_client()
    body = event_body(event_id="evt_rotated")
    now = int(time.time())
    old = factories.stripe_signature(body, "whsec_old", now)
    new = factories.stripe_signature(body, "whsec_new", now)
    both = f"{old},v1={new.split('v1=')[1]}"
    wrong_then_new = f"t={now},v1={'0' * 64},v1={new.split('v1=')[1]}"
    assert post(client, body, new).status_code == 200
    assert post(client, body, old).json["duplicate"] is True
    assert post(client, body, both).status_code == 200
    assert post(client, body, wrong_then_new).status_code == 200
    assert count(clean_db, "webhook_events") == 1


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"type": "x"}', b'{"id": 42}',
                                  b'{"id": ""}', b'{"id": "evt_nul\\u0000"}',
                                  b'{"id": "evt_1", "x": NaN}', b'{"id": "e", "s": "\\ud800"}',
                                  b"\xff\xfe"])
def test_bad_bodies_with_valid_signature_are_400(client, clean_db, body) -> None:  # type: ignore[no-untyped-def]
    assert post(client, body).status_code == 400
    assert count(clean_db, "webhook_events") == 0


def test_oversized_body_is_413_from_content_length(settings, clean_db) -> None:  # type: ignore[no-untyped-def]
    small = Settings(**{**settings.__dict__, "max_body_bytes": 100})
    client = create_app(small).test_client()
    body = event_body()
    assert len(body) > 100
    response = post(client, body)
    assert response.status_code == 413
    assert count(clean_db, "webhook_events") == 0


def test_unknown_and_unconfigured_providers_are_404(client, clean_db) -> None:  # type: ignore[no-untyped-def]
    body = event_body()
    assert post(client, body, provider="nope").status_code == 404
    assert post(client, body, provider="paddle").status_code == 404
    assert count(clean_db, "webhook_events") == 0


def test_database_down_is_503_and_readyz_503(settings) -> None:  # type: ignore[no-untyped-def]
    port = processes.free_port()  # nothing listens there
    down = Settings(**{**settings.__dict__,
                       "database_url": f"postgresql://postgres@127.0.0.1:{port}/test"})
    client = create_app(down).test_client()
    response = post(client, event_body())
    assert response.status_code == 503
    assert response.headers["Retry-After"]
    assert client.get("/readyz").status_code == 503
    assert client.get("/healthz").status_code == 200


def test_pooled_connections_killed_by_the_server_are_replaced_not_answered_503(
    client, clean_db
) -> None:  # type: ignore[no-untyped-def]
    """A database restart leaves dead connections in the web's pool: the next delivery is
    retried once on a fresh connection instead of being refused."""
    assert post(client, event_body(event_id="evt_before")).status_code == 200
    with clean_db.connect() as conn:
        killed = conn.execute(sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'webhooks' "
            "AND pid <> pg_backend_pid()")).scalar_one()
    assert killed >= 1
    response = post(client, event_body(event_id="evt_after"))
    assert response.status_code == 200 and response.json["duplicate"] is False
    assert count(clean_db, "jobs") == 2


def test_health_and_metrics(client) -> None:  # type: ignore[no-untyped-def]
    post(client, event_body())
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "webhooks_deliveries_received_total" in metrics
    assert "webhooks_ack_latency_seconds_bucket" in metrics


# --- separate OS processes against the real server -----------------------------------

def _deliver(url: str, body: bytes, signature: str, barrier, results) -> None:  # type: ignore[no-untyped-def]
    barrier.wait()
    response = requests.post(url, data=body, headers={"Stripe-Signature": signature}, timeout=30)
    results.put((response.status_code, response.json()))


def test_twenty_processes_deliver_the_same_event_at_once(  # type: ignore[no-untyped-def]
    settings, clean_db, tmp_path: Path
) -> None:
    env = {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
           "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET}
    body = event_body(event_id="evt_race")
    signature = factories.stripe_signature(body, STRIPE_SECRET)
    with processes.web_server(env, tmp_path / "web.log", workers=3) as base:
        context = multiprocessing.get_context("spawn")
        barrier, results = context.Barrier(24), context.Queue()
        senders = [context.Process(target=_deliver, args=(f"{base}/webhooks/stripe", body,
                                                          signature, barrier, results))
                   for _ in range(24)]
        for sender in senders:
            sender.start()
        answers = [results.get(timeout=60) for _ in senders]
        for sender in senders:
            sender.join(10)
    assert all(status == 200 for status, _ in answers)
    assert sum(1 for _, body in answers if body["duplicate"] is False) == 1
    assert count(clean_db, "webhook_events") == 1
    assert count(clean_db, "jobs") == 1
    assert count(clean_db, "webhook_duplicates") == 23


def test_the_pool_has_a_connection_for_each_server_thread(settings, clean_db) -> None:  # type: ignore[no-untyped-def]
    engine = create_app(settings, threads=12).extensions["engine"]
    assert engine.pool.size() == 12  # a thread never waits for a connection (nor gets 503)
