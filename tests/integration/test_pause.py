"""Pause and resume a provider: its deliveries are recorded, its jobs not claimed (nor
counted as due, so nothing wakes for them); on resume they run, oldest first."""

from __future__ import annotations

import json

import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy.engine import Engine

from tests import factories
from webhooks.cli import main
from webhooks.ingest.app import create_app
from webhooks.shared import events, handlers, overview, pausing, queries
from webhooks.shared.settings import Settings
from webhooks.worker import jobs


def job_of(engine: Engine, provider: str, n: int) -> int:
    event = factories.stripe_event("invoice.paid", factories.invoice(customer=f"cus_{n}"),
                                   event_id=f"evt_{provider}_{n}")
    return factories.insert_event_and_job(engine, event, provider=provider)


def statuses(engine: Engine) -> dict[int, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("SELECT id, status FROM jobs")).all())


def due(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(queries.JobCountDue).scalar_one())


def test_a_paused_providers_jobs_are_not_claimed_nor_due(clean_db, settings) -> None:  # type: ignore[no-untyped-def]
    handlers.load(settings)
    stripe = [job_of(clean_db, "stripe", n) for n in range(5)]
    github = [job_of(clean_db, "github", n) for n in range(3)]
    assert pausing.pause(clean_db, "stripe") is True
    assert pausing.pause(clean_db, "stripe") is False  # idempotent
    assert due(clean_db) == 3  # the sweeper wakes nobody for stripe's jobs
    result = jobs.process_batch(clean_db, settings, limit=50)
    assert result.claimed == 3
    after = statuses(clean_db)
    assert [after[j] for j in github] == ["done"] * 3
    assert [after[j] for j in stripe] == ["pending"] * 5
    # A wake-up sent for a paused job does not claim it either.
    assert jobs.process_batch(clean_db, settings, limit=50).claimed == 0
    with clean_db.connect() as conn:
        attempts = conn.execute(sa.text("SELECT max(attempts) FROM jobs WHERE provider = "
                                        "'stripe'")).scalar_one()
    assert attempts == 0  # nothing claimed and released, no attempt spent
    assert pausing.resume(clean_db, "stripe") == 5
    assert pausing.resume(clean_db, "stripe") is None
    jobs.process_batch(clean_db, settings, limit=50)
    with clean_db.connect() as conn:
        order = conn.execute(sa.text("SELECT id FROM jobs WHERE provider = 'stripe' "
                                     "ORDER BY finished_at, id")).scalars().all()
    assert order == sorted(stripe)  # oldest first
    assert set(statuses(clean_db).values()) == {"done"}


def test_pause_is_shown_by_events_overview_stats_and_metrics(clean_db, settings) -> None:  # type: ignore[no-untyped-def]
    job_of(clean_db, "stripe", 1)
    env = {"DATABASE_URL": settings.database_url, "BROKER_URL": settings.broker_url}
    runner = CliRunner()
    paused = runner.invoke(main, ["pause", "stripe"], env=env)
    assert paused.exit_code == 0 and "stripe paused" in paused.output
    runner.invoke(main, ["pause", "paddle"], env=env)
    with clean_db.connect() as conn:
        rows = events.list_events(conn, events.EventFilter()).events
        counts = {p.provider: p.paused for p in overview.overview(conn)}
    assert [row.paused for row in rows] == [True]
    assert counts == {"stripe": True, "paddle": True}  # paddle: paused before any event
    listing = runner.invoke(main, ["events"], env=env)
    assert "pending (paused)" in listing.output
    assert '"paused": true' in runner.invoke(main, ["events", "--json"], env=env).output
    stats = runner.invoke(main, ["stats"], env=env)
    assert "paused: paddle since" in stats.output and "paused: stripe since" in stats.output
    text = create_app(settings).test_client().get("/metrics").get_data(as_text=True)
    assert 'webhooks_provider_paused{provider="stripe",source="stripe"} 1.0' in text
    assert 'webhooks_provider_paused{provider="github",source="github"} 0.0' in text
    resumed = runner.invoke(main, ["resume", "stripe"], env=env)
    assert resumed.exit_code == 0 and "1 due job(s)" in resumed.output
    assert "was not paused" in runner.invoke(main, ["resume", "stripe"], env=env).output
    assert runner.invoke(main, ["pause", "nope"], env=env).exit_code == 2


def test_deliveries_of_a_paused_provider_are_acknowledged(clean_db, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    pausing.pause(clean_db, "stripe")
    event = factories.stripe_event("invoice.paid", factories.invoice())
    body = json.dumps(event).encode()
    client = create_app(settings).test_client()
    answer = client.post("/webhooks/stripe", data=body, headers={
        "Stripe-Signature": factories.stripe_signature(body, "whsec_test_secret"),
        "Content-Type": "application/json"})
    assert answer.status_code == 200 and answer.json["status"] == "pending"
    assert statuses(clean_db) and set(statuses(clean_db).values()) == {"pending"}
