"""`webhooks audit` against a real Postgres: it holds (exit 0, nothing printed) once the
reference handlers processed a realistic set of events, and names each violation (exit 1):
a missing ledger entry, a balance off by one, a sent email without its Postmark id, a job
due too long (not while its provider is paused), an event without its job. It runs in one
read-only REPEATABLE READ snapshot; the clock runs it, logs and records what it found."""

from __future__ import annotations

import json
import logging
import random
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result
from sqlalchemy.engine import Connection, Engine

from tests import factories, processes
from tests.acceptance.world import World
from tests.conftest import TEST_APPS
from tests.fakes.postmark_server import FakePostmark
from webhooks.cli import main
from webhooks.clock import schedule
from webhooks.ingest.app import create_app
from webhooks.shared import audit as audits
from webhooks.shared import db, handlers, hooks, pausing
from webhooks.shared.hooks import Finding
from webhooks.shared.settings import Settings
from webhooks.worker import jobs, outbox
from webhooks.worker.postmark import PostmarkSender

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "providers"


@pytest.fixture(autouse=True)
def _handlers(settings: Settings) -> None:
    handlers.load(settings)


def audit(settings: Settings, *args: str, **env: str) -> Result:
    environment = {"DATABASE_URL": settings.database_url, "BROKER_URL": settings.broker_url,
                   "WEBHOOK_HANDLERS": ",".join(TEST_APPS), **env}
    return CliRunner().invoke(main, ["audit", *args], env=environment)


def execute(engine: Engine, sql: str, **params: Any) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(sql), params)


def insert(engine: Engine, provider: str, event_id: str, event_type: str,
           payload: Any) -> None:
    """An event and its pending job, as the ingest records them."""
    with engine.begin() as conn:
        conn.execute(sa.text("""
            WITH event AS (
                INSERT INTO webhook_events (provider, source, event_id, event_type, payload)
                VALUES (:provider, :provider, :event_id, :event_type, CAST(:payload AS jsonb))
                RETURNING provider, source, event_id, event_type
            )
            INSERT INTO jobs (provider, source, event_id, event_type) SELECT * FROM event"""),
            {"provider": provider, "event_id": event_id, "event_type": event_type,
             "payload": json.dumps(payload)})


def fixture_events() -> Iterator[tuple[str, str, str, Any]]:
    """The providers' published payloads in tests/fixtures: (provider, id, type, payload)."""
    for path in sorted(FIXTURES.glob("stripe/*.json")):
        event = json.loads(path.read_bytes())
        yield "stripe", event["id"], event["type"], event
    for provider in ("github", "paddle", "shopify", "slack", "standard"):
        for path in sorted(FIXTURES.glob(f"{provider}/*.json")):
            payload = json.loads(path.read_bytes())
            if isinstance(payload, dict):  # not an API's list
                yield provider, f"{provider}-{path.stem}", path.stem, payload


@pytest.fixture()
def processed(clean_db: Engine, settings: Settings) -> Engine:
    """A database after the reference handlers processed the published fixtures and a
    billing system's mix of events (tests/acceptance/world.py), and the emails were sent
    through a fake Postmark."""
    for provider, event_id, event_type, payload in fixture_events():
        insert(clean_db, provider, event_id, event_type, payload)
    world = World(rng=random.Random(2511))
    world.mixed(150)
    for event in world.events:
        insert(clean_db, event.provider, event.event_id, event.event_type,
               json.loads(event.body))
    while jobs.process_batch(clean_db, settings, limit=50, budget_seconds=30).claimed:
        pass
    with FakePostmark() as fake:
        sender = PostmarkSender(fake.token, fake.url, settings.email_from)
        while outbox.dispatch_due(clean_db, settings, sender=sender).claimed:
            pass
    with clean_db.connect() as conn:
        statuses = dict(conn.execute(sa.text(
            "SELECT status, count(*) FROM jobs GROUP BY status")).all())
        emails = dict(conn.execute(sa.text(
            "SELECT status, count(*) FROM outbox GROUP BY status")).all())
    assert set(statuses) == {"done"} and set(emails) == {"sent"}, (statuses, emails)
    return clean_db


def lines(result: Result) -> list[str]:
    return result.output.splitlines()


def test_the_audit_holds_after_the_reference_handlers(processed: Engine,
                                                      settings: Settings) -> None:
    result = audit(settings)
    assert (result.exit_code, result.output) == (0, "")
    assert audit(settings, "--json").output == ""
    with processed.connect() as conn:  # the checks had something to check
        assert conn.execute(sa.text("SELECT count(*) FROM ledger_entries")).scalar_one() > 20


def test_the_audit_names_a_missing_ledger_entry(processed: Engine, settings: Settings) -> None:
    with processed.connect() as conn:
        # An entry of some amount (a zero-amount invoice's entry changes no sum when gone;
        # which invoice is credited first depends on how the batches were cut).
        key = conn.execute(sa.text("SELECT entry_key FROM ledger_entries WHERE kind = "
                                   "'invoice' AND amount > 0 ORDER BY id LIMIT 1")).scalar_one()
    execute(processed, "DELETE FROM ledger_entries WHERE entry_key = :key", key=key)
    result = audit(settings)
    assert result.exit_code == 1
    invoice = key.removeprefix("invoice:")
    assert [line for line in lines(result) if line.startswith("invoice credits: ")] == [
        f"invoice credits: invoice {invoice}: paid "
        f"{line_amount(result, invoice)}, 0 ledger entries of 0 in total"]
    assert any(line.startswith("account balances: ") for line in lines(result))


def test_the_audit_names_a_double_credit_booked_under_a_second_key(
        processed: Engine, settings: Settings) -> None:
    """An invoice credited by its invoice.paid, and credited again by its
    invoice.payment_succeeded under a key of that handler's own choosing (another kind and
    reference too), the balance raised to match: the entries are counted by the invoice
    their events name, not by their keys."""
    with processed.connect() as conn:
        key, customer, currency, amount, payload = conn.execute(sa.text("""
            SELECT l.entry_key, l.customer_id, l.currency, l.amount, e.payload
            FROM ledger_entries l JOIN webhook_events e USING (provider, event_id)
            WHERE l.kind = 'invoice' AND e.event_type = 'invoice.paid' AND l.amount > 0
            ORDER BY l.id LIMIT 1""")).one()
    invoice = key.removeprefix("invoice:")
    other = {**payload, "id": "evt_second_carrier", "type": "invoice.payment_succeeded"}
    insert(processed, "stripe", other["id"], other["type"], other)
    jobs.process_batch(processed, settings, limit=10)
    assert audit(settings).exit_code == 0  # its job done, "already credited"
    execute(processed, """
        INSERT INTO ledger_entries (customer_id, currency, amount, provider, event_id,
                                    entry_key, kind, reference)
        VALUES (:customer, :currency, :amount, 'stripe', :event_id, :key, 'payment', 'pi_x')""",
            customer=customer, currency=currency, amount=amount, event_id=other["id"],
            key=f"payment:{other['id']}")
    execute(processed, "UPDATE accounts SET balance = balance + :amount "
                       "WHERE customer_id = :customer AND currency = :currency",
            amount=amount, customer=customer, currency=currency)
    result = audit(settings)
    assert (result.exit_code, lines(result)) == (1, [
        f"invoice credits: invoice {invoice}: paid {amount}, 2 ledger entries of "
        f"{2 * amount} in total"])


def line_amount(result: Result, invoice: str) -> str:
    line = next(line for line in lines(result) if f"invoice {invoice}: paid " in line)
    return line.split(": paid ")[1].split(",")[0]


def test_the_audit_names_a_balance_off_by_one(processed: Engine, settings: Settings) -> None:
    with processed.connect() as conn:
        customer, currency, balance = conn.execute(sa.text(
            "SELECT customer_id, currency, balance FROM accounts ORDER BY 1, 2 LIMIT 1")).one()
    execute(processed, "UPDATE accounts SET balance = balance + 1 WHERE customer_id = :c "
                       "AND currency = :cur", c=customer, cur=currency)
    result = audit(settings)
    assert (result.exit_code, lines(result)) == (1, [
        f"account balances: account {customer} {currency}: balance {balance + 1}, "
        f"its entries total {balance}"])


def test_the_audit_names_a_sent_email_without_its_message_id(processed: Engine,
                                                              settings: Settings) -> None:
    with processed.connect() as conn:
        email_id, key = conn.execute(sa.text(
            "SELECT id, idempotency_key FROM outbox ORDER BY id LIMIT 1")).one()
    execute(processed, "UPDATE outbox SET message_id = NULL WHERE id = :id", id=email_id)
    result = audit(settings)
    assert result.exit_code == 1
    assert lines(result) == [f"email message ids: email {email_id} ({key.split(':')[0]}, key "
                             f"{key}) is sent without Postmark's message id"]


def test_the_audit_names_a_job_due_too_long_unless_paused(clean_db: Engine,
                                                          settings: Settings) -> None:
    factories.insert_event_and_job(clean_db, factories.stripe_event(
        "invoice.paid", factories.invoice("in_late"), event_id="evt_late"))
    execute(clean_db, "UPDATE jobs SET run_at = now() - interval '20 minutes'")
    factories.insert_event_and_job(clean_db, factories.stripe_event(  # due, but not for long
        "invoice.paid", factories.invoice("in_recent"), event_id="evt_recent"))
    result = audit(settings)
    assert result.exit_code == 1
    assert len(lines(result)) == 1
    assert lines(result)[0].startswith(
        "due jobs: job 1 (stripe invoice.paid evt_late, attempts 0) has been due for 12")
    assert lines(result)[0].endswith(" s, longer than 900 s")
    assert audit(settings, "--stale", "30m").exit_code == 0
    assert audit(settings, "--stale", "1200s").exit_code == 1
    pausing.pause(clean_db, "stripe")
    assert (audit(settings).exit_code, audit(settings).output) == (0, "")


def test_the_audit_names_an_event_without_its_job(clean_db: Engine, settings: Settings) -> None:
    execute(clean_db, "INSERT INTO webhook_events (provider, source, event_id, event_type, "
                      "payload) VALUES ('github', 'github', 'gh_orphan', 'push', '{}')")
    result = audit(settings)
    assert result.exit_code == 1
    assert len(lines(result)) == 1
    assert lines(result)[0].startswith("event jobs: github event gh_orphan (push, received ")
    assert lines(result)[0].endswith(") has no job")
    assert audit(settings, "--since", "2999-01-01").exit_code == 0  # recorded before that


def test_json_is_one_object_per_violation_naming_its_rows(processed: Engine,
                                                          settings: Settings) -> None:
    execute(processed, "UPDATE outbox SET message_id = NULL WHERE id IN "
                       "(SELECT id FROM outbox ORDER BY id LIMIT 2)")
    execute(processed, "INSERT INTO webhook_events (provider, source, event_id, event_type, "
                       "payload) VALUES ('stripe', 'stripe', 'evt_orphan', 'invoice.paid', '{}')")
    result = audit(settings, "--json")
    assert result.exit_code == 1
    objects = [json.loads(line) for line in lines(result)]
    assert [(o["check"], sorted(o)) for o in objects] == [
        ("event jobs", ["check", "message", "provider", "rows"]),
        ("email message ids", ["check", "message", "provider", "rows"]),
        ("email message ids", ["check", "message", "provider", "rows"])]
    assert objects[0]["provider"] == "stripe"
    assert objects[0]["rows"] == {"webhook_events": {"provider": "stripe",
                                                     "event_id": "evt_orphan"}}
    assert set(objects[1]["rows"]["outbox"]) == {"id", "idempotency_key"}


@pytest.fixture()
def snapshot_check() -> Iterator[None]:
    """A registered check that reports its transaction's isolation and access mode."""

    @hooks.audit_check("test", "snapshot")
    def snapshot(conn: Connection, since: Any) -> Iterator[Finding]:
        isolation, read_only = conn.execute(sa.text(
            "SELECT current_setting('transaction_isolation'), "
            "current_setting('transaction_read_only')")).one()
        yield Finding(f"{isolation} {read_only}")

    try:
        yield
    finally:
        hooks._audit_checks.pop(("test", "snapshot"))


def test_the_audit_runs_in_one_read_only_repeatable_read_snapshot(
        clean_db: Engine, settings: Settings, snapshot_check: None) -> None:
    result = audit(settings)
    assert (result.exit_code, lines(result)) == (1, ["snapshot: repeatable read on"])


def test_the_audit_needs_only_the_right_to_read(processed: Engine, settings: Settings) -> None:
    role, password = f"webhooks_reader_{secrets.token_hex(4)}", secrets.token_hex(16)
    # A password: the embedded test server asks for one (scram), the machine's trusts.
    execute(processed, f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    try:
        execute(processed, f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
        url = sa.make_url(processed.url).set(username=role, password=password)
        reader = Settings(**{**settings.__dict__,
                             "database_url": url.render_as_string(hide_password=False)})
        assert (audit(reader).exit_code, audit(reader).output) == (0, "")
        execute(processed, "UPDATE accounts SET balance = balance - 1")
        assert audit(reader).exit_code == 1
    finally:
        execute(processed, f"DROP OWNED BY {role}")
        execute(processed, f"DROP ROLE {role}")


def test_a_database_down_is_one_line_and_exit_1(settings: Settings) -> None:
    down = f"postgresql://postgres@127.0.0.1:{processes.free_port()}/test"
    result = CliRunner().invoke(main, ["audit"], env={"DATABASE_URL": down})
    assert result.exit_code == 1
    assert result.output.startswith("webhooks: database unavailable: ")
    assert len(lines(result)) == 1 and "Traceback" not in result.output


@pytest.mark.parametrize("stale", ["15", "15x", "-1m", "1h30m", ""])
def test_a_bad_duration_is_bad_usage(settings: Settings, stale: str) -> None:
    result = audit(settings, "--stale", stale)
    assert result.exit_code == 2 and "is not a duration" in result.output


def test_the_clock_logs_and_records_the_violations_metrics_show(
        processed: Engine, settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    engine = db.create_engine(settings, pool_size=1)
    client = create_app(settings, threads=1).test_client()
    assert schedule.audit(engine) is not None
    text = client.get("/metrics").get_data(as_text=True)
    assert 'webhooks_audit_violations{check="account balances"} 0.0' in text
    assert 'webhooks_audit_violations{check="event jobs"} 0.0' in text

    execute(processed, "UPDATE accounts SET balance = balance + 1 WHERE (customer_id, currency)"
                       " IN (SELECT customer_id, currency FROM accounts ORDER BY 1, 2 LIMIT 2)")
    with caplog.at_level(logging.ERROR, logger="webhooks.clock.schedule"):
        report = schedule.audit(engine)
    assert report is not None and report.counts["account balances"] == 2
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and all(r.getMessage().startswith("audit: account ")
                                    for r in errors)
    assert errors[0].check == "account balances"  # type: ignore[attr-defined]
    with engine.connect() as conn:
        counts = dict(conn.execute(sa.text(
            "SELECT check_name, violations FROM audit_results")).all())
    assert counts == {"event jobs": 0, "email message ids": 0, "due jobs": 0,
                      "account balances": 2, "invoice credits": 0, "refund totals": 0}
    client = create_app(settings, threads=1).test_client()  # its own cache of the gauges
    text = client.get("/metrics").get_data(as_text=True)
    assert 'webhooks_audit_violations{check="account balances"} 2.0' in text
    engine.dispose()


def test_one_clock_at_a_time_audits(clean_db: Engine, settings: Settings) -> None:
    engine = db.create_engine(settings, pool_size=1)
    with clean_db.connect() as other, other.begin():  # another clock is auditing
        other.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:name))"),
                      {"name": audits.CLOCK_LOCK})
        assert schedule.audit(engine) is None
    assert schedule.audit(engine) is not None
    engine.dispose()


def test_the_clock_process_audits_at_start_and_every_interval(
        processed: Engine, settings: Settings, tmp_path: Path) -> None:
    execute(processed, "UPDATE accounts SET balance = balance + 1 WHERE customer_id IN "
                       "(SELECT customer_id FROM accounts ORDER BY 1 LIMIT 1)")
    env = {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
           "AUDIT_INTERVAL_SECONDS": "1", "LOG_FORMAT": "json"}
    log = tmp_path / "clock.log"
    clock = processes.start(["clock"], env, log)
    try:
        processes.wait_until(lambda: "audit: account " in log.read_text(), timeout=60)

        def recorded() -> object:  # the counts are written after the violations are logged
            with processed.connect() as conn:
                return conn.execute(sa.text("SELECT ran_at FROM audit_results WHERE "
                                            "check_name = 'account balances'")).scalar()

        first = processes.wait_until(recorded, timeout=60)
        execute(processed, "UPDATE accounts SET balance = balance + 1")  # every account now

        def counted() -> bool:
            with processed.connect() as conn:
                return bool(conn.execute(sa.text(
                    "SELECT violations > 1 AND ran_at > :first FROM audit_results "
                    "WHERE check_name = 'account balances'"), {"first": first}).scalar())

        processes.wait_until(counted, timeout=60)
    finally:
        processes.stop(clock)
    errors = [json.loads(line) for line in log.read_text().splitlines()
              if line.startswith("{") and '"audit: ' in line]
    assert errors and all(line["level"] == "error" for line in errors), errors[:2]
