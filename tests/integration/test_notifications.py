"""Recording notifications against a real Postgres: in the transaction of the change they
report, coalesced per kind and source, failing and recovered once per period."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories
from webhooks.shared import db, handlers, notifications
from webhooks.shared.notifications import Kind, Occurrence
from webhooks.shared.settings import Settings
from webhooks.worker import jobs, outbox


@pytest.fixture(autouse=True)
def _handlers(settings: Settings) -> None:
    handlers.load(settings)


@pytest.fixture()
def notify_settings(settings: Settings, clean_db: Engine) -> Settings:
    return dataclasses.replace(settings, notify_slack_webhook_url="http://127.0.0.1:9/slack",
                               notify_window_seconds=300, notify_failing_threshold=4)


def rows(engine: Engine, sql: str = "SELECT * FROM notifications ORDER BY created_at, id",
         **params: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(sql), params))


def bad_invoice_job(engine: Engine, n: int = 0, source: str | None = None) -> int:
    """An invoice.paid without a customer: its handler raises on every attempt."""
    event = factories.stripe_event("invoice.paid", {"id": f"in_bad_{n}", "object": "invoice",
                                                    "amount_paid": 100, "currency": "usd"})
    return factories.insert_event_and_job(engine, event, source=source)


def good_invoice_job(engine: Engine, n: int = 0) -> int:
    return factories.insert_event_and_job(
        engine, factories.stripe_event("invoice.paid", factories.invoice(
            f"in_good_{n}", customer=f"cus_{n}", amount=100)))


def drain(engine: Engine, settings: Settings, rounds: int = 20) -> None:
    for _ in range(rounds):
        if not jobs.process_batch(engine, settings, limit=50).claimed:
            return


def record(engine: Engine, settings: Settings, *items: Occurrence) -> notifications.Queued:
    with db.transaction(engine) as conn:
        return notifications.record(conn, settings, items)


def test_a_failed_job_and_its_notification_commit_together(clean_db, notify_settings) -> None:
    job_id = bad_invoice_job(clean_db)
    drain(clean_db, notify_settings)  # attempts exhausted (JOB_MAX_ATTEMPTS=3)
    [job] = rows(clean_db, "SELECT status, last_error FROM jobs WHERE id = :id", id=job_id)
    assert job.status == "failed"
    [note] = rows(clean_db)
    assert (note.kind, note.provider, note.source, note.count, note.status) == (
        "job.failed", "stripe", "stripe", 1, "pending")
    assert note.details["first_error"] == job.last_error
    [sample] = note.details["samples"]
    assert sample.startswith(f"job {job_id} (")
    assert note.id.startswith("ntf_") and len(note.id) == 30
    [delivery] = rows(clean_db, "SELECT * FROM notification_deliveries")
    assert (delivery.channel, delivery.status, delivery.attempts) == ("slack", "pending", 0)


def test_a_rolled_back_failure_leaves_no_notification(clean_db, notify_settings,
                                                     monkeypatch) -> None:
    bad_invoice_job(clean_db)
    settings = dataclasses.replace(notify_settings, job_max_attempts=1)

    def mark_then_break(conn: Any, statement: Any, params: Any) -> None:
        conn.execute(statement, params)
        raise RuntimeError("the transaction fails after the mark")

    monkeypatch.setattr(jobs, "_mark", mark_then_break)
    with pytest.raises(RuntimeError):
        drain(clean_db, settings)
    assert rows(clean_db) == []
    assert rows(clean_db, "SELECT * FROM notification_windows") == []
    assert rows(clean_db, "SELECT status FROM jobs")[0].status == "pending"


def test_a_burst_is_one_immediate_and_one_tail_with_the_rest(clean_db, notify_settings) -> None:
    settings = dataclasses.replace(notify_settings, job_max_attempts=1)
    for n in range(40):
        bad_invoice_job(clean_db, n)
    drain(clean_db, settings)
    assert rows(clean_db, "SELECT count(*) AS n FROM jobs WHERE status = 'failed'")[0].n == 40
    found = rows(clean_db, "SELECT * FROM notifications WHERE kind = 'job.failed' "
                 "ORDER BY created_at, count")
    assert [n.count for n in found] == [1, 39]
    first, tail = found
    assert first.due_at == first.created_at  # due at once
    [window] = rows(clean_db, "SELECT * FROM notification_windows WHERE kind = 'job.failed'")
    assert window.tail_id == tail.id and tail.due_at == window.closes_at
    assert len(tail.details["samples"]) == notifications.SAMPLES

    # After the window: the next one is immediate again, and a new window opens.
    with db.transaction(clean_db) as conn:
        conn.execute(sa.text("UPDATE notification_windows SET closes_at = now() - interval '1s'"))
    recorded = record(clean_db, settings, Occurrence(Kind.JOB_FAILED, "stripe", "stripe"))
    assert recorded.due_now == 1
    assert [n.count for n in rows(clean_db, "SELECT * FROM notifications WHERE kind = "
                                  "'job.failed' ORDER BY created_at, count")] == [1, 39, 1]


def test_a_sealed_tail_is_not_added_to(clean_db, notify_settings) -> None:
    key = Occurrence(Kind.EMAIL_FAILED, "stripe")
    record(clean_db, notify_settings, key)
    record(clean_db, notify_settings, dataclasses.replace(key, count=2))
    with db.transaction(clean_db) as conn:  # the dispatcher's claim seals the tail
        conn.execute(sa.text("UPDATE notifications SET sealed = true WHERE count = 2"))
    record(clean_db, notify_settings, dataclasses.replace(key, count=5))
    assert sorted(n.count for n in rows(clean_db)) == [1, 2, 5]


def test_two_connections_recording_one_key_make_one_immediate(clean_db, notify_settings) -> None:
    started = threading.Barrier(2)
    results: list[notifications.Queued] = []

    def recorder() -> None:
        with db.transaction(clean_db) as conn:
            started.wait()
            results.append(notifications.record(
                conn, notify_settings, [Occurrence(Kind.JOB_FAILED, "stripe", "stripe")]))
            time.sleep(0.2)  # hold the window row: the other recorder waits for COMMIT

    threads = [threading.Thread(target=recorder) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.due_now for r in results) == [0, 1]
    found = rows(clean_db)
    assert len(found) == 2 and sorted(n.count for n in found) == [1, 1]
    immediate = [n for n in found if n.due_at == n.created_at]
    assert len(immediate) == 1


def test_failing_and_recovered_once_per_period(clean_db, notify_settings) -> None:
    settings = dataclasses.replace(notify_settings, job_max_attempts=100)
    bad = [bad_invoice_job(clean_db, n) for n in range(3)]
    for _ in range(3):  # 9 failed attempts: the threshold (4) is passed once
        jobs.process_batch(clean_db, settings, limit=50)
        with db.transaction(clean_db) as conn:
            conn.execute(sa.text("UPDATE jobs SET run_at = now()"))
    kinds = [n.kind for n in rows(clean_db)]
    assert kinds.count("provider.failing") == 1 and "provider.recovered" not in kinds
    with db.transaction(clean_db) as conn:  # the failing jobs stop being due
        conn.execute(sa.text("UPDATE jobs SET run_at = now() + interval '1 hour'"))
    for n in range(3):
        good_invoice_job(clean_db, n)
        drain(clean_db, settings)
    kinds = [n.kind for n in rows(clean_db)]
    assert kinds.count("provider.recovered") == 1 and kinds.count("provider.failing") == 1
    [failing] = [n for n in rows(clean_db) if n.kind == "provider.failing"]
    assert failing.count >= settings.notify_failing_threshold

    # A new failing period: failing again, then recovered again.
    with db.transaction(clean_db) as conn:
        conn.execute(sa.text("UPDATE jobs SET run_at = now() WHERE status = 'pending'"))
    for _ in range(2):
        jobs.process_batch(clean_db, settings, limit=50)
        with db.transaction(clean_db) as conn:
            conn.execute(sa.text("UPDATE jobs SET run_at = now() WHERE status = 'pending'"))
    good_invoice_job(clean_db, 99)
    with db.transaction(clean_db) as conn:
        conn.execute(sa.text("UPDATE jobs SET run_at = now() + interval '1 hour' "
                             "WHERE id = ANY(:ids)"), {"ids": bad})
    drain(clean_db, settings)
    kinds = [n.kind for n in rows(clean_db)]
    assert (kinds.count("provider.failing"), kinds.count("provider.recovered")) == (2, 2)


def test_a_successful_batch_with_nothing_failing_records_nothing(clean_db,
                                                                 notify_settings) -> None:
    for n in range(5):
        good_invoice_job(clean_db, n)
    drain(clean_db, notify_settings)
    assert rows(clean_db) == []
    assert rows(clean_db, "SELECT * FROM notification_health") == []


def test_without_a_channel_a_notification_is_recorded_sent(clean_db, settings) -> None:
    record(clean_db, settings, Occurrence(Kind.DATABASE_FAILOVER))
    [note] = rows(clean_db)
    assert (note.status, note.provider, note.source) == ("sent", None, None)
    assert rows(clean_db, "SELECT * FROM notification_deliveries") == []


def test_a_failed_email_records_email_failed_in_its_transaction(clean_db, notify_settings,
                                                               monkeypatch) -> None:
    from webhooks.shared.errors import EmailRejected

    with db.transaction(clean_db) as conn:
        conn.execute(sa.text(
            "INSERT INTO outbox (idempotency_key, kind, to_address, subject, text_body, "
            "html_body, provider, event_id) VALUES ('receipt:in_1', 'receipt', 'x@invalid', "
            "'s', 't', 'h', 'stripe', 'evt_1')"))

    class Refusing:
        def find_sent(self, key: str) -> None:
            return None

        def send(self, emails: Any) -> list[Any]:
            return [EmailRejected("invalid address") for _ in emails]

    result = outbox.dispatch_due(clean_db, notify_settings, sender=Refusing())
    assert result.failed == 1 and result.notified.due_now == 1
    [note] = rows(clean_db)
    assert (note.kind, note.provider, note.details["samples"]) == (
        "email.failed", "stripe", ["receipt:in_1"])
    assert "invalid address" in note.details["first_error"]


def test_a_handler_notifies_with_its_job(clean_db, notify_settings) -> None:
    @handlers.handler("github", "test.notify")
    def noisy(ctx: handlers.JobContext) -> str:
        ctx.notify("stripe.event_generation_failed", object_id="in_1")
        return "noted"

    factories.insert_event_and_job(clean_db, {"id": "gh_1", "type": "test.notify"},
                                   provider="github")
    drain(clean_db, notify_settings)
    [note] = rows(clean_db)
    assert (note.kind, note.provider, note.details["object_id"]) == (
        "stripe.event_generation_failed", "github", "in_1")


def test_reconciliation_runs_record_found_and_failing(clean_db, notify_settings) -> None:
    from webhooks.shared import reconciliation
    from webhooks.shared.reconciliation import Result

    start = datetime.now(UTC)
    reconciliation.since_for_clock(clean_db, "stripe")
    reconciliation.record_run(clean_db, Result("stripe", start, listed=5, recorded=3),
                              notify_settings)
    for _ in range(4):
        reconciliation.record_run(clean_db, Result("stripe", start, error="HTTP 500"),
                                  notify_settings)
    found = {n.kind: n for n in rows(clean_db)}
    assert found["reconcile.found"].count == 3
    assert found["reconcile.failing"].count == 3
    assert [n.kind for n in rows(clean_db)].count("reconcile.failing") == 1


def test_the_command_lists_notifications_newest_first(clean_db, settings,
                                                      notify_settings) -> None:
    import json

    from click.testing import CliRunner

    from webhooks.cli import main

    record(clean_db, notify_settings, Occurrence(Kind.JOB_FAILED, "stripe", "connect",
                                                 error="boom\x1b[31m"))
    record(clean_db, settings, Occurrence(Kind.DATABASE_FAILOVER))  # no channel
    env = {"DATABASE_URL": settings.database_url, "BROKER_URL": settings.broker_url}
    result = CliRunner().invoke(main, ["notifications", "--json"], env=env)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [line["kind"] for line in lines] == ["database.failover", "job.failed"]
    assert lines[1]["label"] == "stripe/connect" and lines[1]["count"] == 1
    assert lines[1]["status"] == "pending" and lines[1]["channels"] == {"slack": "pending"}
    assert lines[0]["shown_status"] == "no channel"
    table = CliRunner().invoke(main, ["notifications", "--limit", "1"], env=env)
    assert table.exit_code == 0
    assert "database.failover" in table.output and "job.failed" not in table.output
    assert "no channel" in table.output
    bad = CliRunner().invoke(main, ["notifications", "--kind", "nope"], env=env)
    assert bad.exit_code == 2


def test_retention_prunes_old_finished_notifications_only(clean_db, notify_settings,
                                                          settings) -> None:
    from webhooks.shared import retention

    record(clean_db, settings, Occurrence(Kind.DATABASE_FAILOVER))  # sent: no channel
    record(clean_db, notify_settings, Occurrence(Kind.JOB_FAILED, "stripe", "stripe"))
    with db.transaction(clean_db) as conn:
        conn.execute(sa.text("UPDATE notifications SET created_at = now() - interval '40 days'"))
        conn.execute(sa.text("UPDATE notification_windows "
                             "SET closes_at = now() - interval '40 days'"))
    retention.prune(clean_db, 30, 90)
    assert [n.kind for n in rows(clean_db)] == ["job.failed"]  # still pending: kept
    assert rows(clean_db, "SELECT * FROM notification_windows") == []


def test_the_sweep_records_a_failover_once_and_wakes_the_dispatcher_for_due_tails(
        clean_db, notify_settings) -> None:
    from dramatiq.brokers.stub import StubBroker

    from webhooks.clock.sweep import sweep
    from webhooks.shared import wakeups

    broker = StubBroker()
    broker.declare_queue(wakeups.NOTIFY_QUEUE)
    engine = db.create_engine(notify_settings, pool_size=1)
    try:
        sweep(engine, broker, notify_settings)  # the first timeline: the start
        with clean_db.begin() as conn:  # as a promoted standby's table would show it
            conn.execute(sa.text("UPDATE database_timelines SET timeline_id = timeline_id "
                                 "+ 1000, first_seen_at = now() - interval '1 day'"))
        seen = sweep(engine, broker, notify_settings)
        assert seen is not None and seen.due_notifications == 1
        sweep(engine, broker, notify_settings)
        [failover] = rows(clean_db)
        assert (failover.kind, failover.provider) == ("database.failover", None)

        # A coalesced tail is due when its window closes: the sweep counts and wakes it.
        record(clean_db, notify_settings, Occurrence(Kind.JOB_FAILED, "stripe", "stripe"))
        record(clean_db, notify_settings, Occurrence(Kind.JOB_FAILED, "stripe", "stripe"))
        queue = broker.queues[wakeups.NOTIFY_QUEUE]
        while not queue.empty():
            queue.get_nowait()
        assert sweep(engine, broker, notify_settings).due_notifications == 2  # type: ignore[union-attr]
        with clean_db.begin() as conn:
            conn.execute(sa.text("UPDATE notification_deliveries SET run_at = now() "
                                 "WHERE status = 'pending'"))
        assert sweep(engine, broker, notify_settings).due_notifications == 3  # type: ignore[union-attr]
        assert queue.qsize() >= 1
    finally:
        engine.dispose()


def test_web_metrics_show_notifications_per_status(clean_db, notify_settings,
                                                   settings) -> None:
    from webhooks.ingest.app import create_app

    record(clean_db, notify_settings, Occurrence(Kind.JOB_FAILED, "stripe", "stripe"))
    record(clean_db, settings, Occurrence(Kind.DATABASE_FAILOVER))
    text = create_app(settings).test_client().get("/metrics").get_data(as_text=True)
    assert 'webhooks_notifications{status="pending"} 1.0' in text
    assert 'webhooks_notifications{status="sent"} 1.0' in text
    assert 'webhooks_notifications{status="failed"} 0.0' in text
