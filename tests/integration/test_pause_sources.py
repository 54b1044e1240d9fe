"""Pause and resume per source: `pause stripe/connect` holds that source's jobs while the
provider's other sources run; `pause stripe` holds every Stripe source; resuming wakes
them. The commands take PROVIDER/SOURCE from the registry (`send`, `events --source`,
`pause`, `resume`), and the metrics carry a `source` label. Real Postgres and a real `web`
process for `send`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from prometheus_client import REGISTRY
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from webhooks.cli import main
from webhooks.ingest.app import create_app
from webhooks.shared import pausing, queries
from webhooks.shared.settings import Settings
from webhooks.worker import jobs

CONNECT_SECRET = "whsec_connect_endpoint_secret"
EU_SECRET = "whsec_second_account_secret"


def sourced_env(settings: Settings) -> dict[str, str]:
    return {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
            "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "STRIPE_SOURCES": "connect,eu",
            "STRIPE_CONNECT_WEBHOOK_SECRET": CONNECT_SECRET, "STRIPE_CONNECT_CONNECT": "1",
            "STRIPE_EU_WEBHOOK_SECRET": EU_SECRET, "JOB_RETRY_BASE_SECONDS": "0",
            "WEBHOOKS_DATA_DIR": str(settings.data_dir)}


@pytest.fixture()
def sourced(settings: Settings) -> Settings:
    return Settings.from_env(sourced_env(settings))


def job_of(engine: Engine, provider: str, source: str, n: int) -> int:
    event = factories.stripe_event("invoice.paid", factories.invoice(customer=f"cus_{n}"),
                                   event_id=f"evt_{provider}_{source}_{n}")
    return factories.insert_event_and_job(engine, event, provider=provider, source=source)


def statuses(engine: Engine) -> dict[tuple[str, str], set[str]]:
    """The job statuses of each (provider, source)."""
    found: dict[tuple[str, str], set[str]] = {}
    with engine.connect() as conn:
        for row in conn.execute(sa.text("SELECT provider, source, status FROM jobs")):
            found.setdefault((row.provider, row.source), set()).add(row.status)
    return found


def due(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(queries.JobCountDue).scalar_one())


def jobs_of_three_sources(engine: Engine) -> None:
    for n in range(3):
        job_of(engine, "stripe", "stripe", n)
        job_of(engine, "stripe", "connect", n)
        job_of(engine, "github", "github", n)


def test_a_paused_source_waits_while_its_providers_other_sources_run(  # type: ignore[no-untyped-def]
        clean_db, sourced) -> None:
    jobs_of_three_sources(clean_db)
    assert pausing.pause(clean_db, "stripe", "connect") is True
    assert pausing.pause(clean_db, "stripe", "connect") is False  # idempotent
    assert due(clean_db) == 6  # nothing wakes for the paused source's jobs
    jobs.process_batch(clean_db, sourced, limit=50)
    assert statuses(clean_db) == {("stripe", "stripe"): {"done"}, ("github", "github"): {"done"},
                                  ("stripe", "connect"): {"pending"}}
    assert jobs.process_batch(clean_db, sourced, limit=50).claimed == 0
    assert pausing.resume(clean_db, "stripe", "connect") == 3
    jobs.process_batch(clean_db, sourced, limit=50)
    assert {s for found in statuses(clean_db).values() for s in found} == {"done"}


def test_pausing_a_provider_pauses_every_source_of_it(clean_db, sourced) -> None:  # type: ignore[no-untyped-def]
    jobs_of_three_sources(clean_db)
    pausing.pause(clean_db, "stripe")
    pausing.pause(clean_db, "stripe", "connect")  # also on its own
    jobs.process_batch(clean_db, sourced, limit=50)
    assert statuses(clean_db) == {("stripe", "stripe"): {"pending"},
                                  ("stripe", "connect"): {"pending"},
                                  ("github", "github"): {"done"}}
    # Resuming the source alone leaves it paused with its provider.
    assert pausing.resume(clean_db, "stripe", "connect") == 0
    assert pausing.resume(clean_db, "stripe") == 6  # every source, its own pauses included
    with clean_db.connect() as conn:
        assert pausing.paused(conn) == []
    jobs.process_batch(clean_db, sourced, limit=50)
    assert {s for found in statuses(clean_db).values() for s in found} == {"done"}


def test_the_commands_take_a_source_and_the_metrics_label_it(  # type: ignore[no-untyped-def]
        clean_db, sourced, settings) -> None:
    job_of(clean_db, "stripe", "connect", 1)
    job_of(clean_db, "stripe", "stripe", 2)
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE webhook_events SET account = 'acct_connected', "
                             "livemode = false WHERE source = 'connect'"))
    env, runner = sourced_env(settings), CliRunner()
    paused = runner.invoke(main, ["pause", "stripe/connect"], env=env)
    assert paused.exit_code == 0 and "stripe/connect paused" in paused.output
    stats = runner.invoke(main, ["stats"], env=env).output
    assert "paused: stripe/connect since" in stats and "paused: stripe since" not in stats
    listing = runner.invoke(main, ["events", "--source", "stripe/connect"], env=env).output
    assert "stripe/connect" in listing and "acct_connected" in listing
    assert "evt_stripe_connect_1" in listing and "evt_stripe_stripe_2" not in listing
    assert "pending (paused)" in listing
    default = runner.invoke(main, ["events", "--source", "stripe", "--json"], env=env).output
    assert [json.loads(line)["source"] for line in default.splitlines()] == ["stripe"]
    shown = runner.invoke(main, ["show", "stripe", "evt_stripe_connect_1"], env=env).output
    assert "source        stripe/connect; account acct_connected; test mode" in shown
    text = create_app(sourced).test_client().get("/metrics").get_data(as_text=True)
    assert 'webhooks_provider_paused{provider="stripe",source="connect"} 1.0' in text
    assert 'webhooks_provider_paused{provider="stripe",source="eu"} 0.0' in text
    assert 'webhooks_provider_paused{provider="stripe",source="stripe"} 0.0' in text
    resumed = runner.invoke(main, ["resume", "stripe/connect"], env=env)
    assert resumed.exit_code == 0 and "1 due job(s)" in resumed.output


@pytest.mark.parametrize("command", [["pause"], ["resume"], ["events", "--source"]])
def test_an_unknown_source_is_bad_usage_in_one_line(command: list[str], settings) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(main, [*command, "stripe/nope"], env=sourced_env(settings))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "webhooks: 'stripe/nope' is not a configured source "
        "(configured: stripe, stripe/connect, stripe/eu)"]


def test_send_signs_with_the_sources_secret_and_posts_to_its_url(  # type: ignore[no-untyped-def]
        clean_db, settings, tmp_path: Path) -> None:
    env = sourced_env(settings)
    event = {**factories.stripe_event("invoice.paid", factories.invoice(),
                                      event_id="evt_sent_to_connect"), "account": "acct_sent"}
    (tmp_path / "event.json").write_text(json.dumps(event))
    with processes.web_server(env, tmp_path / "web.log", workers=1) as base:
        port = base.rsplit(":", 1)[1]
        sent = CliRunner().invoke(main, ["send", "stripe/connect", str(tmp_path / "event.json")],
                                  env={**env, "PORT": port})
    assert sent.exit_code == 0, sent.output
    with clean_db.connect() as conn:
        row = conn.execute(sa.text("SELECT source, account FROM webhook_events")).one()
    assert tuple(row) == ("connect", "acct_sent")  # verified against the Connect secret


def counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_ingests_counters_label_the_source(clean_db, sourced) -> None:  # type: ignore[no-untyped-def]
    """Received, duplicate and rejected deliveries counted by source; a path no source is
    configured at is `unknown`, so the registry bounds the label's values."""
    client = create_app(sourced).test_client()
    body = json.dumps({**factories.stripe_event("invoice.paid", factories.invoice(),
                                                event_id="evt_counted"),
                       "account": "acct_counted"}).encode()
    connect = {"provider": "stripe", "source": "connect"}
    before = {name: counted(name, **connect) for name in (
        "webhooks_deliveries_received_total", "webhooks_deliveries_duplicate_total")}
    refused_before = counted("webhooks_deliveries_rejected_total", **connect, reason="signature")
    unknown_before = counted("webhooks_deliveries_rejected_total", provider="stripe",
                             source="unknown", reason="not_configured")

    def post(path: str, secret: str) -> int:
        return client.post(f"/webhooks/{path}", data=body, headers={
            "Stripe-Signature": factories.stripe_signature(body, secret)}).status_code

    assert [post("stripe/connect", CONNECT_SECRET), post("stripe/connect", CONNECT_SECRET),
            post("stripe/connect", EU_SECRET), post("stripe/nope", CONNECT_SECRET)] == \
        [200, 200, 400, 400]  # an unknown source is answered as a bad signature
    assert {name: counted(name, **connect) - value for name, value in before.items()} == {
        "webhooks_deliveries_received_total": 1, "webhooks_deliveries_duplicate_total": 1}
    assert counted("webhooks_deliveries_rejected_total", **connect,
                   reason="signature") - refused_before == 1
    assert counted("webhooks_deliveries_rejected_total", provider="stripe", source="unknown",
                   reason="not_configured") - unknown_before == 1
    assert counted("webhooks_signature_verified_total", **connect, secret="1") >= 2
