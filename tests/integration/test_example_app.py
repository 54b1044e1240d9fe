"""The example app, examples/acme_billing (docs/your-app.md), as a team runs it: named in
WEBHOOK_HANDLERS (`acme_billing`, found on PYTHONPATH as a team's package would be), alone
with its own lock key or beside the reference app. On a fresh database `webhooks migrate`
creates its table in a version table of its own; through the Procfile's `web`, `worker` and
`clock`, signed duplicate deliveries of one invoice's two events, sent at once with
`webhooks send --repeat --concurrency`, leave one row of its effect and one email;
`webhooks show` shows its effect and `webhooks audit` runs its check (exit 0, then 1 naming
the invoice whose row is gone). Two lock keys for Stripe stop a process naming both apps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests import factories, processes
from tests.conftest import ROOT, STRIPE_SECRET, broker_url

APP = "acme_billing"
VERSIONS = "alembic_version_acme_billing"
LEDGER = "webhooks.ledger"
LEDGER_TABLES = {"accounts", "ledger_entries", "subscriptions"}
ALONE = f"{APP},{APP}.locking"  # with its own Stripe lock key
BESIDE_THE_LEDGER = f"{LEDGER},{APP}"  # the reference app's lock key serves both


def env_for(url: str, handlers: str) -> dict[str, str]:
    return {"DATABASE_URL": url, "BROKER_URL": broker_url(), "WEBHOOK_HANDLERS": handlers,
            "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "examples"), str(ROOT)]),
            "SWEEP_INTERVAL_SECONDS": "1", "AUDIT_INTERVAL_SECONDS": "0",
            "WORKER_METRICS_PORT": "0"}


def webhooks(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`webhooks ARGS` as an operator runs it, in a process of its own."""
    return subprocess.run([sys.executable, "-m", "webhooks", *args], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=180)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout




def rows(engine: sa.Engine, sql: str) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(sql))]


def table_names(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return set(sa.inspect(conn).get_table_names())


@pytest.mark.parametrize("handlers", [ALONE, BESIDE_THE_LEDGER],
                         ids=["alone", "beside-the-reference-app"])
def test_the_example_app_migrates_and_applies_concurrent_duplicates_once(
        fresh_database: tuple[str, sa.Engine], tmp_path: Path, handlers: str) -> None:
    url, engine = fresh_database
    env = env_for(url, handlers)
    with_ledger = handlers.startswith(LEDGER)

    # `release`: the core's history, then each named app's, in its own version table.
    migrated = ok(webhooks("migrate", env=env))
    assert f"{APP}: empty -> acme_0001" in migrated
    assert migrated.index("core: empty") < migrated.index(APP)
    assert {"acme_paid_invoices", VERSIONS} <= table_names(engine)
    assert rows(engine, f"SELECT version_num FROM {VERSIONS}") == [("acme_0001",)]
    assert (LEDGER_TABLES <= table_names(engine)) is with_ledger
    assert f"{APP}: at acme_0001 (nothing to apply)" in ok(webhooks("migrate", env=env))
    ok(webhooks("migrate", "--check", env=env))  # its METADATA is what the database holds

    invoice = factories.invoice("in_acme_1", customer="cus_acme", amount=2500,
                                email="jenny@example.com")
    paid, succeeded = (factories.stripe_event(event_type, invoice, event_id=event_id)
                       for event_type, event_id in (("invoice.paid", "evt_acme_paid"),
                                                    ("invoice.payment_succeeded",
                                                     "evt_acme_succeeded")))
    files = {}
    for event in (paid, succeeded):
        files[event["id"]] = tmp_path / f"{event['id']}.json"
        files[event["id"]].write_text(json.dumps(event))

    log = tmp_path / "processes.log"
    worker = processes.start(["worker", "--processes", "1", "--threads", "3"], env, log)
    clock = processes.start(["clock"], env, log)  # wakes the worker if another took a message
    try:
        with processes.web_server(env, log) as base:
            answers = []
            for event_id, repeat in (("evt_acme_paid", "8"), ("evt_acme_succeeded", "4")):
                sent = ok(webhooks("send", "stripe", str(files[event_id]), "--url",
                                   f"{base}/webhooks/stripe", "--repeat", repeat,
                                   "--concurrency", repeat, env=env))
                answers += [json.loads(line.split(" ", 1)[1]) for line in sent.splitlines()]
            assert len(answers) == 12
            assert sorted(answer["duplicate"] for answer in answers).count(False) == 2
            processes.wait_until(lambda: rows(
                engine, "SELECT count(*) FILTER (WHERE status = 'done'), "
                        "(SELECT count(*) FROM outbox WHERE status <> 'sent') FROM jobs")
                == [(2, 0)], timeout=60)
    finally:
        processes.stop(worker)
        processes.stop(clock)

    assert rows(engine, "SELECT invoice_id, customer_id, amount_paid, currency "
                        "FROM acme_paid_invoices") == [("in_acme_1", "cus_acme", 2500, "usd")]
    assert rows(engine, "SELECT idempotency_key, to_address, status FROM outbox "
                        "WHERE kind = 'acme_thanks'") == [
        ("acme_thanks:in_acme_1", "jenny@example.com", "sent")]
    outcomes = sorted(str(outcome) for (outcome,) in rows(engine, "SELECT outcome FROM jobs"))
    if with_ledger:  # each app ran in the job's transaction, in the order named
        assert outcomes == [f"{LEDGER}: already credited; {APP}: already recorded",
                            f"{LEDGER}: credited; {APP}: recorded"]
        assert rows(engine, "SELECT amount FROM ledger_entries") == [(2500,)]
        assert rows(engine, "SELECT count(*) FROM outbox") == [(2,)]  # its receipt, and ours
    else:
        assert outcomes == ["already recorded", "recorded"]
        assert rows(engine, "SELECT count(*) FROM outbox") == [(1,)]

    shown = json.loads(ok(webhooks("show", "stripe", "evt_acme_succeeded", "--json", env=env)))
    assert shown["acme_paid_invoice"]["invoice_id"] == "in_acme_1"

    assert ok(webhooks("audit", env=env)) == ""
    with engine.begin() as conn:  # the effect lost: the app's own audit check names it
        conn.execute(sa.text("DELETE FROM acme_paid_invoices"))
    audit = webhooks("audit", env=env)
    assert audit.returncode == 1, audit.stdout + audit.stderr
    assert "invoice in_acme_1: paid 2500, no row" in audit.stdout


def test_the_example_apps_lock_key_beside_the_reference_apps_stops_the_process(
        fresh_database: tuple[str, sa.Engine]) -> None:
    """A provider has one lock key among the running apps: naming acme_billing.locking
    beside webhooks.ledger stops a process at start, naming both."""
    url, _ = fresh_database
    result = webhooks("clock", env=env_for(url, f"{BESIDE_THE_LEDGER},{APP}.locking"))
    assert result.returncode == 1
    assert (f"two apps register a lock key for stripe: {LEDGER} and {APP}.locking"
            in result.stderr)
