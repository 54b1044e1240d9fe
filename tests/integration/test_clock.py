"""The clock: lost wake-ups are found, a broker outage delays work but loses none, two
clocks do no harm, and retention keeps what it must."""

from __future__ import annotations

import json
from pathlib import Path

import requests
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from webhooks.shared import retention
from webhooks.shared.settings import Settings


def env_for(settings: Settings, broker_url: str | None = None) -> dict[str, str]:
    return {"DATABASE_URL": settings.database_url or "",
            "BROKER_URL": broker_url or settings.broker_url or "",
            "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "SWEEP_INTERVAL_SECONDS": "0.5"}


def scalar(engine: Engine, sql: str) -> object:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql)).scalar()


def all_done(engine: Engine, expected: int) -> bool:
    return scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == expected


def test_broker_down_at_ingest_then_sweeper_gets_every_job_done(
    settings: Settings, clean_db: Engine, tmp_path: Path
) -> None:
    redis = processes.PrivateRedis(tmp_path)
    redis.start()
    env = env_for(settings, redis.url)
    log = tmp_path / "processes.log"
    with processes.web_server(env, log) as base:
        redis.stop()  # the broker goes away while providers keep delivering
        for index in range(20):
            body = json.dumps(factories.stripe_event(
                "invoice.paid", factories.invoice(f"in_down_{index}", customer="cus_down",
                                                  amount=10))).encode()
            headers = {"Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)}
            response = requests.post(f"{base}/webhooks/stripe", data=body, headers=headers,
                                     timeout=10)
            assert response.status_code == 200
    assert scalar(clean_db, "SELECT count(*) FROM jobs WHERE status = 'pending'") == 20
    redis.start()  # back, empty: every wake-up was lost
    worker = processes.start(["worker", "--processes", "1", "--threads", "2"], env, log)
    clock = processes.start(["clock"], env, log)
    try:
        processes.wait_until(lambda: all_done(clean_db, 20), timeout=60)
    finally:
        for process in (worker, clock):
            processes.stop(process)
        redis.stop()
    assert scalar(clean_db, "SELECT balance FROM accounts WHERE customer_id = 'cus_down'") == 200


def test_lost_messages_with_two_clocks_are_applied_once(
    settings: Settings, clean_db: Engine, tmp_path: Path
) -> None:
    for index in range(40):  # rows with no broker message at all
        factories.insert_event_and_job(clean_db, factories.stripe_event(
            "invoice.paid", factories.invoice(f"in_lost_{index}", customer="cus_lost", amount=5)))
    env, log = env_for(settings), tmp_path / "processes.log"
    started = [processes.start(["clock"], env, log), processes.start(["clock"], env, log),
               processes.start(["worker", "--processes", "1", "--threads", "2"], env, log)]
    try:
        processes.wait_until(lambda: all_done(clean_db, 40), timeout=60)
    finally:
        for process in started:
            processes.stop(process)
    assert scalar(clean_db, "SELECT balance FROM accounts WHERE customer_id = 'cus_lost'") == 200
    assert scalar(clean_db, "SELECT count(*) FROM ledger_entries") == 40
    assert scalar(clean_db, "SELECT max(attempts) FROM jobs") == 1
    # Whichever clock swept stamped the one heartbeat, with its interval (web's /metrics
    # shows its age: WebhookClockStopped).
    assert scalar(clean_db, "SELECT count(*) FROM clock_heartbeats WHERE name = 'sweep' AND "
                            "beat_at > now() - interval '1 minute'") == 1
    assert scalar(clean_db, "SELECT interval_seconds FROM clock_heartbeats") == 0.5


def test_prune_keeps_pending_and_failed_work_and_recent_events(
    settings: Settings, clean_db: Engine
) -> None:
    def job(status: str, age_days: int) -> int:
        event = factories.stripe_event("invoice.paid", factories.invoice())
        job_id = factories.insert_event_and_job(clean_db, event, status=status)
        with clean_db.begin() as conn:
            conn.execute(sa.text(
                "UPDATE jobs SET finished_at = now() - make_interval(days => :d), "
                "created_at = now() - make_interval(days => :d) WHERE id = :id"),
                {"d": age_days, "id": job_id})
        return job_id

    old_done = [job("done", 40) for _ in range(5)]
    kept = [job("pending", 40), job("failed", 40), job("done", 3)]
    assert retention.prune(clean_db, days=30, horizon_days=90, batch_size=2).events == 5
    with clean_db.connect() as conn:
        remaining = {row[0] for row in conn.execute(sa.text("SELECT id FROM jobs"))}
    assert remaining == set(kept) and not remaining & set(old_done)
    assert scalar(clean_db, "SELECT count(*) FROM webhook_events") == 3


def test_duplicate_within_retention_is_still_detected_after_prune(
    settings: Settings, clean_db: Engine
) -> None:
    from webhooks.ingest.app import create_app

    client = create_app(settings).test_client()
    body = json.dumps(factories.stripe_event("invoice.paid", factories.invoice())).encode()

    def deliver():  # type: ignore[no-untyped-def]
        return client.post("/webhooks/stripe", data=body, headers={
            "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)}).json

    assert deliver()["duplicate"] is False
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'done', finished_at = now() - "
                             "interval '2 days'"))
    assert retention.prune(clean_db, days=settings.retention_days,
                           horizon_days=settings.dedup_horizon_days).events == 0
    assert deliver() == {"event_id": json.loads(body)["id"], "duplicate": True, "status": "done"}
