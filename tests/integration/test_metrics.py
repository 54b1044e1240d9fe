"""web's /metrics: the gauges read from the database, their cache, and every 503 counted."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from webhooks.ingest import health
from webhooks.ingest.app import create_app
from webhooks.shared import pausing
from webhooks.shared.settings import Settings


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, tuple(sorted(labels.items())))]


def deliver(client, event_id: str):  # type: ignore[no-untyped-def]
    body = json.dumps(factories.stripe_event("invoice.paid", factories.invoice(),
                                             event_id=event_id)).encode()
    return client.post("/webhooks/stripe", data=body, headers={
        "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})


def test_every_database_503_is_counted_as_database(settings: Settings) -> None:
    """A sustained outage: every delivery is answered 503 and every one counted (before,
    only the first was; the pool's later connects raised the driver's own error)."""
    port = processes.free_port()  # nothing listens there
    down = Settings(**{**settings.__dict__,
                       "database_url": f"postgresql://postgres@127.0.0.1:{port}/test"})
    client = create_app(down, threads=1).test_client()
    before = samples(client.get("/metrics").get_data(as_text=True)).get(
        ("webhooks_deliveries_rejected_total", (("provider", "stripe"), ("reason", "database"),
                                                ("source", "stripe"))),
        0.0)
    answers = [deliver(client, f"evt_down_{i}") for i in range(7)]
    assert [a.status_code for a in answers] == [503] * 7
    assert all(a.headers["Retry-After"] for a in answers)
    text = client.get("/metrics").get_data(as_text=True)
    assert value(text, "webhooks_deliveries_rejected_total", provider="stripe",
                 source="stripe", reason="database") == before + 7


def test_unexpected_errors_are_counted_by_cause() -> None:
    from webhooks.ingest.webhooks import _refusal_reason
    from webhooks.shared.errors import DatabaseUnavailable

    try:
        try:
            raise sa.exc.TimeoutError("pool exhausted")
        except sa.exc.TimeoutError as error:
            raise RuntimeError("wrapped") from error
    except RuntimeError as wrapped:
        assert _refusal_reason(wrapped) == "database"
    assert _refusal_reason(DatabaseUnavailable("down")) == "database"
    assert _refusal_reason(ValueError("bug")) == "internal"


def test_jobs_emails_and_oldest_due_job_from_the_database(clean_db: Engine,
                                                          settings: Settings) -> None:
    old = datetime.now(UTC) - timedelta(minutes=30)
    for i, status in enumerate(["done", "done", "failed"]):
        factories.insert_event_and_job(
            clean_db, factories.stripe_event("invoice.paid", factories.invoice(),
                                             event_id=f"evt_{status}_{i}"), status=status)
    factories.insert_event_and_job(
        clean_db, factories.stripe_event("invoice.paid", factories.invoice(),
                                         event_id="evt_due"), run_at=old)
    factories.insert_event_and_job(
        clean_db, {"id": "gh_1", "type": "push"}, provider="github", run_at=old)
    factories.insert_event_and_job(
        clean_db, {"id": "gh_2", "type": "push"}, provider="github",
        run_at=datetime.now(UTC) + timedelta(hours=1))  # pending, not due yet
    with clean_db.begin() as conn:
        for i, status in enumerate(["pending", "sent", "sent", "failed"]):
            conn.execute(sa.text(
                "INSERT INTO outbox (idempotency_key, kind, to_address, subject, text_body,"
                " html_body, status) VALUES (:k, 'receipt', 'a@example.com', 's', 't', 'h',"
                " :s)"), {"k": f"k{i}", "s": status})
    pausing.pause(clean_db, "github")  # its jobs are not due

    text = create_app(settings).test_client().get("/metrics").get_data(as_text=True)
    assert value(text, "webhooks_jobs", provider="stripe", status="done") == 2
    assert value(text, "webhooks_jobs", provider="stripe", status="failed") == 1
    assert value(text, "webhooks_jobs", provider="stripe", status="pending") == 1
    assert value(text, "webhooks_jobs", provider="github", status="pending") == 2
    assert value(text, "webhooks_jobs", provider="paddle", status="failed") == 0
    assert value(text, "webhooks_emails", status="sent") == 2
    assert value(text, "webhooks_emails", status="failed") == 1
    assert value(text, "webhooks_emails", status="pending") == 1
    stripe_age = value(text, "webhooks_oldest_due_job_age_seconds", provider="stripe",
                       source="stripe")
    assert 30 * 60 - 5 < stripe_age < 30 * 60 + 60
    assert value(text, "webhooks_oldest_due_job_age_seconds", provider="github",
                 source="github") == 0  # paused
    assert value(text, "webhooks_provider_paused", provider="github", source="github") == 1
    assert value(text, "webhooks_queue_depth", table="jobs") == 1
    assert "ESTIMATE" in text  # the help text says which figures may be estimates


def test_the_database_is_read_at_most_once_per_cache_period(clean_db: Engine,
                                                            settings: Settings,
                                                            monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client = create_app(settings).test_client()
    reads: list[int] = []
    real = health._read_gauges
    monkeypatch.setattr(health, "_read_gauges", lambda conn, configured: (
        reads.append(1), real(conn, configured)))
    first = client.get("/metrics").get_data(as_text=True)
    factories.insert_event_and_job(
        clean_db, factories.stripe_event("invoice.paid", factories.invoice(),
                                         event_id="evt_cached"), status="failed")
    for _ in range(20):
        client.get("/metrics")
    assert len(reads) == 1
    assert value(client.get("/metrics").get_data(as_text=True), "webhooks_jobs",
                 provider="stripe", status="failed") == value(
        first, "webhooks_jobs", provider="stripe", status="failed")
    monkeypatch.setattr(health, "CACHE_SECONDS", 0.0)
    after = client.get("/metrics").get_data(as_text=True)
    assert len(reads) == 2
    assert value(after, "webhooks_jobs", provider="stripe", status="failed") == 1



def test_large_tables_estimate_done_jobs_and_sent_emails(clean_db: Engine, settings: Settings,
                                                          monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Beyond EXACT_BELOW_ROWS, done jobs and sent emails come from the planner's statistics
    (here exact: ANALYZE of a small table samples every row); pending and failed stay exact."""
    with clean_db.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO webhook_events (provider, source, event_id, event_type, payload) "
            "SELECT p, p, p || g, 't', '{}' FROM generate_series(1, 30) g, "
            "unnest(ARRAY['stripe', 'stripe', 'github']) WITH ORDINALITY AS x(p, n) "
            "WHERE n < 3 OR g <= 10 ON CONFLICT DO NOTHING"))
        conn.execute(sa.text(
            "INSERT INTO jobs (provider, source, event_id, event_type, status) "
            "SELECT provider, source, event_id, 't', CASE WHEN event_id IN ('stripe1', 'github1') "
            "THEN 'failed' WHEN event_id = 'stripe2' THEN 'pending' ELSE 'done' END "
            "FROM webhook_events"))
        conn.execute(sa.text(
            "INSERT INTO outbox (idempotency_key, kind, to_address, subject, text_body,"
            " html_body, status) SELECT 'k' || g, 'receipt', 'a@example.com', 's', 't', 'h',"
            " CASE WHEN g = 1 THEN 'failed' ELSE 'sent' END FROM generate_series(1, 20) g"))
    with clean_db.connect() as conn:
        conn.execute(sa.text("ANALYZE jobs"))
        conn.execute(sa.text("ANALYZE outbox"))
        conn.commit()
    monkeypatch.setattr(health, "EXACT_BELOW_ROWS", 10)
    text = create_app(settings).test_client().get("/metrics").get_data(as_text=True)
    assert value(text, "webhooks_jobs", provider="stripe", status="done") == 28
    assert value(text, "webhooks_jobs", provider="stripe", status="failed") == 1
    assert value(text, "webhooks_jobs", provider="stripe", status="pending") == 1
    assert value(text, "webhooks_jobs", provider="github", status="done") == 9
    assert value(text, "webhooks_emails", status="sent") == 19
    assert value(text, "webhooks_emails", status="failed") == 1


def test_the_clock_sweep_age_and_intervals_are_on_metrics(clean_db: Engine,
                                                          settings: Settings) -> None:
    """Each sweep stamps the clock's heartbeat; /metrics shows its age by the database's
    clock, the intervals the clock runs with, and how stale each source it reconciles is
    (only those: a source run by hand once is not expected to stay fresh)."""
    from webhooks.clock.sweep import Beat, sweep
    from webhooks.shared import db, wakeups

    engine = db.create_engine(settings, pool_size=1)
    broker = wakeups.create_broker(settings)
    try:
        assert sweep(engine, broker, beat=Beat(7.0, 120.0, ("stripe/stripe", "stripe/connect")))
    finally:
        broker.close()
        engine.dispose()
    with clean_db.begin() as conn:
        conn.execute(sa.text(
            "UPDATE clock_heartbeats SET beat_at = beat_at - interval '10 minutes'"))
        conn.execute(sa.text(
            "INSERT INTO reconcile_runs (provider, source, last_started_at, last_success_at)"
            " VALUES ('stripe', 'stripe', now(), now() - interval '1 hour'),"
            " ('stripe', 'connect', now(), NULL),"  # never succeeded: no figure
            " ('paddle', 'paddle', now(), now() - interval '3 days')"))  # not scheduled
    text = create_app(settings).test_client().get("/metrics").get_data(as_text=True)
    assert 600 <= value(text, "webhooks_clock_sweep_age_seconds") < 660
    assert value(text, "webhooks_clock_sweep_interval_seconds") == 7
    assert value(text, "webhooks_clock_reconcile_interval_seconds") == 120
    ages = {labels: figure for (name, labels), figure in samples(text).items()
            if name == "webhooks_reconcile_last_success_age_seconds"}
    stripe = ages.pop((("provider", "stripe"), ("source", "stripe")))
    assert 3600 <= stripe < 3660
    assert (("provider", "paddle"), ("source", "paddle")) not in ages
    assert (("provider", "stripe"), ("source", "connect")) not in ages
    # The clock stops reconciling stripe: its figure goes to 0, never stays frozen.
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE clock_heartbeats SET reconcile_sources = '{}'"))
    again = create_app(settings).test_client().get("/metrics").get_data(as_text=True)
    assert value(again, "webhooks_reconcile_last_success_age_seconds", provider="stripe",
                 source="stripe") == 0


def test_the_heartbeat_names_what_the_clock_reconciles(settings: Settings) -> None:
    from webhooks.clock.schedule import beat

    assert beat(settings).reconcile_interval_seconds == 0  # no API credentials
    assert beat(settings).reconcile_sources == ()
    keyed = Settings.from_env({"DATABASE_URL": settings.database_url or "",
                               "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
                               "STRIPE_API_KEY": "sk_test_x",
                               "RECONCILE_INTERVAL_SECONDS": "600",
                               "SWEEP_INTERVAL_SECONDS": "5"})
    assert beat(keyed).reconcile_sources == ("stripe/stripe",)
    assert (beat(keyed).interval_seconds, beat(keyed).reconcile_interval_seconds) == (5, 600)
    off = dataclasses.replace(keyed, reconcile_interval_seconds=0.0)
    assert (beat(off).reconcile_interval_seconds, beat(off).reconcile_sources) == (0, ())
