"""Sources: several endpoints per provider, each verifying only its own secrets, one row per
logical event whichever source carries it (per source for Standard Webhooks), and the
source, account and livemode recorded and seen by handlers. Real Postgres; the providers'
own signers (the `stripe` library checks ours, `standardwebhooks` signs)."""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import standardwebhooks
import stripe
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from tests.integration.test_ingest import _deliver
from webhooks.ingest.app import create_app
from webhooks.shared import handlers
from webhooks.shared.settings import Settings
from webhooks.worker import jobs

ROOT = Path(__file__).resolve().parents[2]
CONNECT_SECRET = "whsec_connect_endpoint_secret"
EU_SECRET = "whsec_second_account_secret"
CLERK_SECRET = "whsec_" + base64.b64encode(b"clerk application key!!").decode()
RESEND_SECRET = "whsec_" + base64.b64encode(b"resend application key!").decode()
SECRETS = {"stripe": STRIPE_SECRET, "stripe/connect": CONNECT_SECRET, "stripe/eu": EU_SECRET}


@pytest.fixture()
def sourced(settings: Settings) -> Settings:
    env = {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
           "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "STRIPE_SOURCES": "connect,eu",
           "STRIPE_CONNECT_WEBHOOK_SECRET": CONNECT_SECRET, "STRIPE_CONNECT_CONNECT": "1",
           "STRIPE_EU_WEBHOOK_SECRET": EU_SECRET, "STANDARD_SOURCES": "clerk,resend",
           "STANDARD_CLERK_WEBHOOK_SECRET": CLERK_SECRET,
           "STANDARD_RESEND_WEBHOOK_SECRET": RESEND_SECRET,
           "JOB_RETRY_BASE_SECONDS": "0", "WEBHOOKS_DATA_DIR": str(settings.data_dir)}
    return Settings.from_env(env)


@pytest.fixture()
def client(sourced: Settings, clean_db: Engine):  # type: ignore[no-untyped-def]
    return create_app(sourced).test_client()


def stripe_body(event_id: str, **fields: Any) -> bytes:
    event = factories.stripe_event("invoice.paid", factories.invoice(), event_id=event_id)
    return json.dumps({**event, "livemode": False, **fields}).encode()


def post_stripe(client, path: str, body: bytes, signed_for: str | None = None):  # type: ignore[no-untyped-def]
    signature = factories.stripe_signature(body, SECRETS[signed_for or path])
    return client.post(f"/webhooks/{path}", data=body, headers={"Stripe-Signature": signature})


def post_standard(client, source: str, secret: str, message_id: str, body: bytes):  # type: ignore[no-untyped-def]
    now = datetime.now(UTC)
    signature = standardwebhooks.Webhook(secret).sign(message_id, now, body.decode())
    return client.post(f"/webhooks/standard/{source}", data=body, headers={
        "webhook-id": message_id, "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature})


def rows(engine: Engine, statement: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(statement))]


def test_the_tests_stripe_signer_is_the_one_the_stripe_library_verifies() -> None:
    body = stripe_body("evt_signer")
    event = stripe.Webhook.construct_event(
        body.decode(), factories.stripe_signature(body, CONNECT_SECRET), CONNECT_SECRET)
    assert event["id"] == "evt_signer"


@pytest.mark.parametrize("path", list(SECRETS))
def test_each_source_verifies_only_its_own_secret(client, clean_db, path: str) -> None:  # type: ignore[no-untyped-def]
    for other in SECRETS:
        if other != path:
            refused = post_stripe(client, path, stripe_body(f"evt_x_{len(other)}"), other)
            assert refused.status_code == 400, (path, other)
    assert rows(clean_db, "SELECT count(*) FROM webhook_events") == [(0,)]
    assert post_stripe(client, path, stripe_body("evt_own")).status_code == 200
    name = path.partition("/")[2] or "stripe"
    assert rows(clean_db, "SELECT source FROM webhook_events") == [(name,)]


def test_unknown_and_unconfigured_sources_record_nothing(client, clean_db) -> None:  # type: ignore[no-untyped-def]
    """A provider with no source, or no such provider, is 404; an unknown source of a
    configured provider is answered as a configured source whose signature fails (400),
    whoever's secret signed it, so that its answer does not tell that it is unknown."""
    body = stripe_body("evt_404")
    for path, status in (("stripe/nosuch", 400), ("stripe/stripe", 400),
                         ("paddle/connect", 404), ("nosuch/connect", 404)):
        response = client.post(f"/webhooks/{path}", data=body, headers={
            "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})
        assert response.status_code == status, path
    assert rows(clean_db, "SELECT count(*) FROM webhook_events") == [(0,)]


def test_the_same_stripe_event_on_two_sources_is_one_row_one_job(client, clean_db) -> None:  # type: ignore[no-untyped-def]
    body = stripe_body("evt_both", account="acct_1")
    assert post_stripe(client, "stripe/connect", body).json["duplicate"] is False
    assert post_stripe(client, "stripe", body).json["duplicate"] is True
    assert rows(clean_db, "SELECT source, account, livemode FROM webhook_events") == [
        ("connect", "acct_1", False)]
    assert rows(clean_db, "SELECT source FROM jobs") == [("connect",)]
    assert rows(clean_db, "SELECT source, event_source FROM webhook_duplicates") == [
        ("stripe", "connect")]


def test_two_standard_senders_with_one_message_id_are_two_events_both_done(  # type: ignore[no-untyped-def]
        client, clean_db, sourced) -> None:
    body = json.dumps({"type": "user.created", "data": {}}).encode()
    assert post_standard(client, "clerk", CLERK_SECRET, "msg_same", body).status_code == 200
    assert post_standard(client, "resend", RESEND_SECRET, "msg_same", body).status_code == 200
    assert post_standard(client, "resend", CLERK_SECRET, "msg_other", body).status_code == 400
    assert rows(clean_db, "SELECT source, account FROM webhook_events ORDER BY source") == [
        ("clerk", None), ("resend", None)]
    assert jobs.process_batch(clean_db, sourced).done == 2
    assert rows(clean_db, "SELECT source, status FROM jobs ORDER BY source") == [
        ("clerk", "done"), ("resend", "done")]


def test_handlers_see_the_source_account_and_livemode(client, clean_db, sourced) -> None:  # type: ignore[no-untyped-def]
    seen: list[tuple[Any, ...]] = []

    @handlers.handler("stripe", "test.sources.seen")
    def record(ctx: handlers.JobContext) -> None:
        seen.append((ctx.source, ctx.account, ctx.livemode))

    try:
        body = stripe_body("evt_seen", type="test.sources.seen", account="acct_9",
                           livemode=True)
        assert post_stripe(client, "stripe/connect", body).status_code == 200
        assert jobs.process_batch(clean_db, sourced).done == 1
    finally:
        handlers._registry.pop(("stripe", "test.sources.seen"))
    assert seen == [("connect", "acct_9", True)]


@pytest.mark.parametrize("process", ["web", "worker", "clock", "console", "migrate"])
def test_a_named_source_without_its_secret_stops_every_process(process: str,
                                                               tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRIPE_", "CONSOLE_"))}
    env.update({"DATABASE_URL": "postgresql://u@127.0.0.1:1/db",
                "BROKER_URL": "redis://127.0.0.1:1/0", "PYTHONPATH": str(ROOT),
                "CONSOLE_PASSWORD": "a long enough password", "STRIPE_SOURCES": "connect"})
    result = subprocess.run([sys.executable, "-m", "webhooks", process], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and "STRIPE_CONNECT_WEBHOOK_SECRET" in lines[0], lines


def test_processes_delivering_one_event_through_two_sources_at_once_make_one_row(  # type: ignore[no-untyped-def]
        sourced, clean_db, tmp_path: Path) -> None:
    env = {"DATABASE_URL": sourced.database_url or "", "BROKER_URL": sourced.broker_url or "",
           "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "STRIPE_SOURCES": "connect",
           "STRIPE_CONNECT_WEBHOOK_SECRET": CONNECT_SECRET, "STRIPE_CONNECT_CONNECT": "1"}
    body = stripe_body("evt_race_sources", account="acct_race")
    paths = ["stripe", "stripe/connect"] * 6
    with processes.web_server(env, tmp_path / "web.log", workers=2) as base:
        context = multiprocessing.get_context("spawn")
        barrier, results = context.Barrier(len(paths)), context.Queue()
        senders = [context.Process(target=_deliver, args=(
            f"{base}/webhooks/{path}", body, factories.stripe_signature(body, SECRETS[path]),
            barrier, results)) for path in paths]
        for sender in senders:
            sender.start()
        answers = [results.get(timeout=60) for _ in senders]
        for sender in senders:
            sender.join(10)
    assert all(status == 200 for status, _ in answers), answers
    assert sum(1 for _, answer in answers if answer["duplicate"] is False) == 1
    assert rows(clean_db, "SELECT count(*), min(account) FROM webhook_events") == [(1, "acct_race")]
    assert rows(clean_db, "SELECT count(*) FROM jobs") == [(1,)]
    assert rows(clean_db, "SELECT count(*) FROM webhook_duplicates") == [(len(paths) - 1,)]



def test_the_allowlist_is_the_sources(settings, clean_db) -> None:  # type: ignore[no-untyped-def]
    env = {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
           "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "STRIPE_SOURCES": "connect",
           "STRIPE_CONNECT_WEBHOOK_SECRET": CONNECT_SECRET,
           "STRIPE_CONNECT_ALLOWED_IPS": "10.0.0.0/8"}
    client = create_app(Settings.from_env(env)).test_client()  # its address: 127.0.0.1
    assert post_stripe(client, "stripe/connect", stripe_body("evt_far")).status_code == 403
    assert post_stripe(client, "stripe", stripe_body("evt_near")).status_code == 200
    assert rows(clean_db, "SELECT event_id, source FROM webhook_events") == [("evt_near", "stripe")]
