"""`webhooks events` and `webhooks show` against the real database: filters, search, JSON,
an event's effects after its job ran, exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result
from sqlalchemy.engine import Engine

from tests import factories
from webhooks.cli import main
from webhooks.shared import handlers
from webhooks.shared.settings import Settings
from webhooks.worker import jobs

WIDTH = 110


@pytest.fixture()
def run(settings: Settings):  # type: ignore[no-untyped-def]
    env = {"DATABASE_URL": settings.database_url, "BROKER_URL": settings.broker_url,
           "COLUMNS": str(WIDTH)}

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(main, list(args), env=env)

    return invoke


def event(engine: Engine, event_type: str = "invoice.paid", *, status: str = "done",
          provider: str = "stripe", age: timedelta | None = None, last_error: str | None = None,
          **invoice: Any) -> str:
    """An event and its job; received `age` ago (default: now, after the previous one)."""
    body = factories.stripe_event(event_type, factories.invoice(**invoice))
    factories.insert_event_and_job(engine, body, provider=provider, status=status,
                                   attempts=2 if status != "pending" else 0,
                                   last_error=last_error)
    if age is not None:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE webhook_events SET received_at = now() - :age "
                                 "WHERE event_id = :id"), {"age": age, "id": body["id"]})
    return str(body["id"])


def listed(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines()]


def ids(result: Result) -> list[str]:
    return [row["event_id"] for row in listed(result)]


def test_newest_first_with_job_status_attempts_and_last_error(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    old = event(clean_db, status="failed", last_error="KeyError: 'customer'",
                age=timedelta(hours=2))
    new = event(clean_db, status="pending")
    rows = listed(run("events", "--json"))
    assert [row["event_id"] for row in rows] == [new, old]
    assert rows[1]["status"] == "failed" and rows[1]["attempts"] == 2
    assert rows[1]["last_error"] == "KeyError: 'customer'"
    assert rows[0]["status"] == "pending" and rows[0]["last_error"] is None
    received = datetime.fromisoformat(rows[1]["received_at"])  # ISO 8601, with its zone
    assert received.tzinfo is not None and set(rows[0]) >= {
        "provider", "event_id", "event_type", "received_at", "job_id", "status", "attempts",
        "last_error"}


def test_each_filter(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    paid = event(clean_db, "invoice.paid", status="done", age=timedelta(days=3))
    failed = event(clean_db, "invoice.payment_failed", status="failed", age=timedelta(hours=5))
    pending = event(clean_db, "invoice.paid", status="pending", age=timedelta(minutes=5))
    paddle = event(clean_db, "transaction.completed", provider="paddle", status="done")
    assert ids(run("events", "--json", "--provider", "paddle")) == [paddle]
    assert ids(run("events", "--json", "--type", "invoice.paid")) == [pending, paid]
    assert ids(run("events", "--json", "--status", "failed")) == [failed]
    assert ids(run("events", "--json", "--status", "pending")) == [pending]
    assert ids(run("events", "--json", "--since", "1d")) == [paddle, pending, failed]
    assert ids(run("events", "--json", "--until", "1h")) == [failed, paid]
    day_before = (datetime.now(UTC) - timedelta(days=4)).date().isoformat()
    assert ids(run("events", "--json", "--since", day_before, "--until", "2h")) == [
        failed, paid]
    assert ids(run("events", "--json", "--limit", "2")) == [paddle, pending]
    both = run("events", "--json", "--provider", "stripe", "--status", "done")
    assert ids(both) == [paid]


def test_limit_beyond_one_page_of_the_listing(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    from webhooks.shared.events import MAX_PAGE

    with clean_db.begin() as conn:
        conn.execute(sa.text("""
            INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                        received_at)
            SELECT 'stripe', 'stripe', 'evt_many_' || n, 'invoice.paid', '{}'::jsonb,
                   now() - make_interval(secs => n)
            FROM generate_series(1, :n) AS n
        """), {"n": MAX_PAGE + 20})
    rows = listed(run("events", "--json", "--limit", str(MAX_PAGE + 10)))
    assert len(rows) == MAX_PAGE + 10
    assert [row["event_id"] for row in rows[:2]] == ["evt_many_1", "evt_many_2"]
    assert len({row["event_id"] for row in rows}) == len(rows)
    assert rows[0]["status"] is None  # an event without a job is listed too


def test_search_by_a_word_only_its_payload_holds_and_by_event_id(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    target = event(clean_db, email="zelda.quartermain@example.org", invoice_id="in_7Xq9Lm")
    others = [event(clean_db) for _ in range(3)]
    assert ids(run("events", "--json", "--search", "zelda.quartermain@example.org")) == [
        target]
    assert ids(run("events", "--json", "--search", "in_7Xq9Lm")) == [target]
    assert ids(run("events", "--json", "--search", target)) == [target]
    assert ids(run("events", "--json", "--search", others[1])) == [others[1]]
    nothing = run("events", "--search", "no-such-word-anywhere")
    assert nothing.exit_code == 0 and "no events match" in nothing.output
    assert run("events", "--json", "--search", "nowhere").output == ""


def test_table_fits_the_terminal_and_cuts_only_the_last_error(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    failed = event(clean_db, status="failed", last_error="ValueError: " + "x" * 300,
                   age=timedelta(hours=3))
    result = run("events")
    assert result.exit_code == 0
    header, line = result.output.splitlines()[:2]
    assert header.split()[:3] == ["status", "attempts", "age"] and "last error" in header
    assert line.split()[:6] == ["failed", "2", "3h", "stripe", "invoice.paid", failed]
    assert "ValueError: xxx" in line and line.endswith("…") and len(line) == WIDTH


@pytest.mark.parametrize("args", [
    ["--status", "stuck"], ["--since", "yesterday"], ["--until", "2026-13-45"],
    ["--limit", "0"], ["--limit", "many"], ["--nope"],
])
def test_bad_usage_exits_2(run, args) -> None:  # type: ignore[no-untyped-def]
    assert run("events", *args).exit_code == 2


def test_show_unknown_event_exits_1_with_one_line(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    result = run("show", "stripe", "evt_nope")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == ["webhooks: no event evt_nope from stripe"]
    assert run("show", "stripe").exit_code == 2


def test_database_unavailable_exits_1_with_one_line() -> None:
    env = {"DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none", "BROKER_URL": ""}
    for args in (["events"], ["show", "stripe", "evt_1"]):
        result = CliRunner().invoke(main, args, env=env)
        assert result.exit_code == 1
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "database unavailable" in lines[0]


def test_show_prints_the_effects_after_the_job_ran(run, clean_db, settings) -> None:  # type: ignore[no-untyped-def]
    handlers.load(settings)
    invoice = factories.invoice("in_show_1", customer="cus_show", amount=2500, currency="eur",
                                email="ada@example.com")
    body = factories.stripe_event("invoice.paid", invoice)
    factories.insert_event_and_job(clean_db, body)
    jobs.process_batch(clean_db, settings)
    with clean_db.begin() as conn:
        conn.execute(sa.text("INSERT INTO webhook_duplicates "
                             "(provider, source, event_id, event_source) "
                             "VALUES ('stripe', 'stripe', :id, 'stripe'), "
                             "('stripe', 'stripe', :id, 'stripe')"), {"id": body["id"]})
        conn.execute(sa.text("UPDATE outbox SET status = 'sent', message_id = 'pm-msg-42', "
                             "sent_at = now()"))
    text = run("show", "stripe", body["id"])
    assert text.exit_code == 0, text.output
    out = text.output
    assert f"stripe {body['id']} (invoice.paid)" in out and "duplicates: 2" in out
    assert "done, 1 attempt(s)" in out
    assert "+2500 eur cus_show" in out
    assert "receipt to ada@example.com: sent" in out and "Postmark pm-msg-42" in out
    assert "receipt:in_show_1" in out
    assert '"customer_email": "ada@example.com"' in out  # the payload, pretty

    detail = json.loads(run("show", "stripe", body["id"], "--json").output)
    assert detail["event"]["payload"] == body and detail["duplicates"] == 2
    assert detail["job"]["status"] == "done" and detail["job"]["attempts"] == 1
    assert datetime.fromisoformat(detail["job"]["finished_at"]).tzinfo is not None
    assert [(e["amount"], e["currency"], e["customer_id"]) for e in detail["ledger_entries"]] \
        == [(2500, "eur", "cus_show")]
    assert [(e["idempotency_key"], e["status"], e["message_id"]) for e in detail["emails"]] \
        == [("receipt:in_show_1", "sent", "pm-msg-42")]


def test_show_a_subscription_event_and_a_failed_job(run, clean_db, settings) -> None:  # type: ignore[no-untyped-def]
    handlers.load(settings)
    body = factories.stripe_event("customer.subscription.updated",
                                  factories.subscription("sub_show", "past_due",
                                                         customer="cus_sub"))
    factories.insert_event_and_job(clean_db, body)
    jobs.process_batch(clean_db, settings)
    out = run("show", "stripe", body["id"]).output
    assert "sub_show of cus_sub: past_due" in out and "ledger        none" in out

    broken = factories.stripe_event("invoice.paid", {"id": "in_broken", "object": "invoice"})
    factories.insert_event_and_job(clean_db, broken, status="failed", attempts=3,
                                   last_error="KeyError: 'customer'")
    shown = json.loads(run("show", "stripe", broken["id"], "--json").output)
    assert shown["job"]["status"] == "failed" and shown["job"]["last_error"] == \
        "KeyError: 'customer'"
    assert shown["ledger_entries"] == [] and shown["emails"] == []


def test_the_real_command_in_a_subprocess(settings, clean_db) -> None:  # type: ignore[no-untyped-def]
    target = event(clean_db, status="failed", email="subprocess.only@example.net",
                   last_error="boom")
    event(clean_db)
    script = Path(sys.executable).with_name("webhooks")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "webhooks"]
    env = {**os.environ, "DATABASE_URL": settings.database_url,
           "BROKER_URL": settings.broker_url or "", "COLUMNS": "100"}

    def webhooks(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*command, *args], env=env, capture_output=True, text=True,
                              timeout=60)

    found = webhooks("events", "--json", "--search", "subprocess.only@example.net")
    assert found.returncode == 0, found.stderr
    assert [json.loads(line)["event_id"] for line in found.stdout.splitlines()] == [target]
    table = webhooks("events", "--status", "failed")
    assert table.returncode == 0 and target in table.stdout and "boom" in table.stdout
    shown = webhooks("show", "stripe", target, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["job"]["last_error"] == "boom"
    missing = webhooks("show", "stripe", "evt_missing")
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
    bad = webhooks("events", "--status", "stuck")
    assert bad.returncode == 2


def test_count_events_stops_at_its_bound(clean_db) -> None:  # type: ignore[no-untyped-def]
    from webhooks.shared.events import EventFilter, count_events

    for _ in range(7):
        factories.insert_event_and_job(clean_db, factories.stripe_event(
            "invoice.paid", factories.invoice()))
    with clean_db.connect() as conn:
        assert count_events(conn, EventFilter()) == 7
        assert count_events(conn, EventFilter(), at_most=3) == 4  # "more than 3"
        assert count_events(conn, EventFilter(), at_most=10) == 7


ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e\nok  1  2s  stripe  invoice.paid  evt_forged"


def test_control_characters_from_data_are_escaped_in_every_output(run, settings, clean_db,  # type: ignore[no-untyped-def]
                                                                  caplog) -> None:
    """Ids, types, emails and errors come from senders: the table, the detail and --json
    print their control characters escaped (no OSC title, clear screen, C1 CSI, bidi
    override or forged row), and so does the text log."""
    import logging

    from webhooks.shared.logs import TextFormatter

    event = factories.stripe_event("invoice.paid" + ESCAPES, factories.invoice(
        "in_esc", customer="cus" + ESCAPES, email="a@example.com" + ESCAPES),
        event_id="evt_esc" + ESCAPES)
    job_id = factories.insert_event_and_job(clean_db, event, last_error="boom" + ESCAPES)
    outputs = [run("events").output, run("events", "--json").output,
               run("show", "stripe", event["id"]).output,
               run("show", "stripe", event["id"], "--json").output]
    for output in outputs:
        assert not any(char in output for char in "\x1b\x07\x9b\u202e"), repr(output[:300])
    table = outputs[0].splitlines()
    assert len(table) == 2 and "\\x1b]0;pwned\\x07" in table[1]
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "event recorded %s",
                               ("evt" + ESCAPES,), None)
    record.event_id, record.job_id = "evt" + ESCAPES, job_id
    line = TextFormatter().format(record)
    assert "\n" not in line and "\x1b" not in line and "\\x1b]0;pwned" in line


def test_an_age_past_the_year_one_is_a_usage_error(run) -> None:  # type: ignore[no-untyped-def]
    result = run("events", "--since", "99999999d")
    assert result.exit_code == 2 and "year 1" in result.output


def test_show_prints_a_payload_nested_as_deep_as_the_ingest_accepts(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    deep: Any = "bottom"
    for _ in range(900):
        deep = [deep]
    factories.insert_event_and_job(clean_db, {"id": "evt_deep", "type": "x", "data": deep})
    for args in (("show", "stripe", "evt_deep"), ("show", "stripe", "evt_deep", "--json")):
        result = run(*args)
        assert result.exit_code == 0 and "bottom" in result.output, result.output[-300:]


def test_json_payload_lines_read_back_as_the_events_delivered(run, settings, clean_db,  # type: ignore[no-untyped-def]
                                                             tmp_path) -> None:
    """Recorded traffic replays in `webhooks check-handlers`: two events delivered through
    the ingest, listed with --json --payload, read back by the kit's reader with their ids,
    types and payloads, numbers, nesting and non-ASCII text as delivered."""
    from tests.conftest import STRIPE_SECRET
    from webhooks.ingest.app import create_app
    from webhooks.testing import read_events

    paid = factories.stripe_event("invoice.paid", factories.invoice(
        "in_payload_1", customer="cus_zoë", amount=1999, email="zoë@example.com"))
    paid["data"]["object"]["lines"] = {"data": [{"amount": 1999, "tax": 0.5, "note": None,
                                                 "tags": ["€", "😀", "\u202e"]}]}
    updated = factories.stripe_event("customer.subscription.updated",
                                     factories.subscription("sub_payload", "past_due"))
    client = create_app(settings).test_client()
    for body in (paid, updated):
        # 0.50, as a sender may write it: jsonb keeps it so, and so does the line
        raw = json.dumps(body, ensure_ascii=False).replace('"tax": 0.5', '"tax": 0.50').encode()
        answer = client.post("/webhooks/stripe", data=raw, headers={
            "Stripe-Signature": factories.stripe_signature(raw, STRIPE_SECRET)})
        assert answer.status_code == 200, answer.get_data(as_text=True)

    result = run("events", "--json", "--payload")
    assert result.exit_code == 0, result.output
    assert result.output.isascii() and len(result.output.splitlines()) == 2
    assert '"tax": 0.50' in result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [line["provider"] for line in lines] == ["stripe", "stripe"]
    assert {"event_id", "event_type", "status", "received_at"} <= set(lines[0])
    recorded = tmp_path / "events.jsonl"
    recorded.write_text(result.output)
    events = read_events([recorded], provider="paddle")  # each line names its own
    assert [(e.provider, e.event_id, e.event_type) for e in events] == [
        ("stripe", updated["id"], "customer.subscription.updated"),
        ("stripe", paid["id"], "invoice.paid")]
    assert [e.payload for e in events] == [updated, paid]

    without = run("events", "--payload")
    assert without.exit_code == 2
    assert without.output.strip().splitlines() == [
        "webhooks: --payload prints the payloads in the JSON lines: give --json with it"]
    assert "payload" not in listed(run("events", "--json"))[0]
