"""The reference app's hooks against a real Postgres: its lock key orders a batch, its
effects are what `webhooks show` and the console show, its audit checks find a missing or
doubled effect; and a provider without hooks gets no lock key and no Stripe sections."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from flask import Flask
from sqlalchemy.engine import Engine

from tests import factories
from tests.console_helpers import PASSWORD, basic
from webhooks.cli import main
from webhooks.console import ConsoleSettings, create_blueprint
from webhooks.shared import db, handlers, hooks
from webhooks.shared.settings import Settings
from webhooks.worker import jobs


@pytest.fixture(autouse=True)
def _handlers(settings: Settings) -> None:
    handlers.load(settings)


def run(engine: Engine, settings: Settings, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        factories.insert_event_and_job(engine, body)
    assert jobs.process_batch(engine, settings, limit=50, budget_seconds=30).done == len(bodies)


def stripe_findings(engine: Engine, **kwargs: Any) -> list[tuple[str, str]]:
    with db.transaction(engine) as conn:
        return [(v.check, v.finding.message) for v in hooks.run_audit_checks(conn, **kwargs)
                if v.provider == "stripe"]


def execute(engine: Engine, sql: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(sql))


def test_a_batch_runs_in_its_providers_lock_key_order_and_others_in_id_order(
        clean_db: Engine, settings: Settings) -> None:
    ran: list[str] = []

    @handlers.handler("stripe", "test.order")
    @handlers.handler("github", "test.order")
    def record(ctx: handlers.JobContext) -> None:
        ran.append(ctx.payload["data"]["object"]["id"])

    for customer, object_id in (("cus_b", "in_1"), ("cus_a", "in_2"), ("cus_a", "in_0")):
        factories.insert_event_and_job(clean_db, factories.stripe_event(
            "test.order", {"customer": customer, "currency": "usd", "id": object_id}))
    for object_id in ("gh_2", "gh_1"):  # github registers no lock key: job id order
        factories.insert_event_and_job(clean_db, {"id": object_id, "type": "test.order",
                                                  "data": {"object": {"customer": "cus_0",
                                                                      "id": object_id}}},
                                       provider="github")
    assert jobs.process_batch(clean_db, settings, limit=10, budget_seconds=30).done == 5
    assert ran == ["gh_2", "gh_1", "in_0", "in_2", "in_1"]


def test_a_provider_without_a_lock_key_takes_no_try_lock(clean_db: Engine,
                                                          settings: Settings) -> None:
    @handlers.handler("github", "test.locked_elsewhere")
    def nothing(ctx: handlers.JobContext) -> str:
        return "ran"

    factories.insert_event_and_job(clean_db, {"id": "gh_held", "type": "test.locked_elsewhere",
                                              "data": {"object": {"customer": "cus_held"}}},
                                   provider="github")
    with clean_db.connect() as other, other.begin():  # another batch holds cus_held
        other.execute(sa.text("SELECT pg_advisory_xact_lock(:space, hashtext('cus_held'))"),
                      {"space": 0x77686B})
        assert jobs.process_batch(clean_db, settings, budget_seconds=30).done == 1
        factories.insert_event_and_job(clean_db, factories.stripe_event(
            "invoice.paid", factories.invoice("in_held", customer="cus_held")))
        held = jobs.process_batch(clean_db, settings, budget_seconds=30)
    assert (held.claimed, held.done) == (1, 0)  # the Stripe job waits for the key


def test_show_and_the_console_show_the_ledgers_sections_only_for_stripe(
        clean_db: Engine, settings: Settings) -> None:
    invoice = factories.stripe_event("invoice.paid", factories.invoice(
        "in_fx", customer="cus_fx", amount=1200, currency="eur"))
    run(clean_db, settings, invoice)
    push = {"id": "gh_push_1", "type": "push", "data": {"object": {"id": "x"}}}
    factories.insert_event_and_job(clean_db, push, provider="github")
    env = {"DATABASE_URL": settings.database_url, "BROKER_URL": settings.broker_url}

    def show(*args: str) -> str:
        result = CliRunner().invoke(main, ["show", *args], env=env)
        assert result.exit_code == 0, result.output
        return result.output

    shown = json.loads(show("stripe", invoice["id"], "--json"))
    assert list(shown) == ["event", "job", "duplicates", "ledger_entries", "subscription",
                           "emails"]
    github = show("github", "gh_push_1")
    assert "ledger" not in github and "subscription" not in github and "emails" in github
    assert "ledger_entries" not in json.loads(show("github", "gh_push_1", "--json"))

    app = Flask(__name__)
    app.register_blueprint(create_blueprint(clean_db, ConsoleSettings(password=PASSWORD),
                                            hook_modules=("webhooks.ledger",)))
    client = app.test_client()
    page = client.get(f"/events/stripe/{invoice['id']}", headers=basic()).get_data(as_text=True)
    assert "<h2>Ledger entries</h2>" in page and "<h2>Subscription</h2>" in page
    assert page.count('class="ledger-entry"') == 1 and "invoice:in_fx" in page
    page = client.get("/events/github/gh_push_1", headers=basic()).get_data(as_text=True)
    assert "Ledger entries" not in page and "Subscription" not in page
    assert "<h2>Emails</h2>" in page


def test_the_audit_checks_hold_after_the_handlers_and_name_a_missing_or_doubled_effect(
        clean_db: Engine, settings: Settings) -> None:
    run(clean_db, settings,
        factories.stripe_event("invoice.paid", factories.invoice("in_a", customer="cus_a",
                                                                 amount=1000)),
        factories.stripe_event("invoice.payment_succeeded",
                               factories.invoice("in_a", customer="cus_a", amount=1000)),
        factories.stripe_event("invoice.paid", factories.invoice("in_zero", customer="cus_a",
                                                                 amount=0)),
        factories.stripe_event("charge.refunded", factories.charge("ch_a", customer="cus_a",
                                                                   refunded=300)),
        factories.stripe_event("charge.refunded", factories.charge("ch_a", customer="cus_a",
                                                                   refunded=100)))
    assert stripe_findings(clean_db) == []

    execute(clean_db, "UPDATE ledger_entries SET amount = 2000 WHERE entry_key = 'invoice:in_a'")
    assert stripe_findings(clean_db) == [
        ("account balances", "account cus_a usd: balance 700, its entries total 1700"),
        ("invoice credits", "invoice in_a: paid 1000, 1 ledger entries of 2000 in total")]

    execute(clean_db, "DELETE FROM ledger_entries WHERE kind = 'refund'")
    execute(clean_db, "UPDATE ledger_entries SET amount = 1000 WHERE entry_key = 'invoice:in_a'")
    execute(clean_db, "UPDATE accounts SET balance = 1000")
    assert stripe_findings(clean_db) == [
        ("refund totals", "charge ch_a: refunded 300, debited 0")]
    future = "2999-01-01T00:00:00+00:00"
    assert stripe_findings(clean_db, since=future) == []  # only events recorded since
