"""After a failover (shared/failover.py), against the real Postgres: the sweep records the
server's timeline, a timeline not seen before is a failover (counted on web's /metrics),
the clock reconciles every provider with credentials over the window before it (also with
periodic runs off, and again after a failed run or a restart), and for as long after it
the outbox searches Postmark before every first send, from the promotion on: before the
clock has recorded the server's new timeline too.

A test server cannot fail over, so a failover is staged the only way the code can tell
one: the table records an earlier timeline than the one the server writes on now.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import processes
from tests.fakes.postmark_server import FakePostmark
from tests.fakes.provider_apis import STRIPE_KEY, FakeProviderApis
from tests.integration.test_outbox import (
    assert_one_message_per_key,
    insert_emails,
    rows,
)
from tests.integration.test_reconcile import serve_stripe, stripe_invoice_paid
from webhooks.clock import schedule
from webhooks.clock.sweep import sweep
from webhooks.ingest.app import create_app
from webhooks.shared import db, failover, wakeups
from webhooks.shared.settings import Settings
from webhooks.worker import outbox
from webhooks.worker.postmark import PostmarkSender

HOURS = 72.0


def scalar(engine: Engine, sql: str, **params: object) -> object:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar()


def current_timeline(engine: Engine) -> int:
    name = scalar(engine, "SELECT pg_walfile_name(pg_current_wal_lsn())")
    return int(str(name)[:8], 16)


def stage_failover(engine: Engine, *, ago: timedelta) -> int:
    """The table as a clock leaves it that saw the server start on an older timeline and
    then this one, `ago`: a failover (whatever was recorded before is replaced). Returns
    the current timeline."""
    now_on = current_timeline(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM database_timelines"))
        conn.execute(sa.text(
            "INSERT INTO database_timelines (timeline_id, failover, first_seen_at) VALUES "
            "(:old, false, now() - interval '30 days'), (:now_on, true, now() - :ago)"),
            {"old": now_on + 1000, "now_on": now_on, "ago": ago})
    return now_on


@pytest.fixture()
def broker(settings: Settings) -> Iterator[object]:
    created = wakeups.create_broker(settings)
    yield created
    created.close()


def test_a_new_timeline_is_a_failover_recorded_once(  # type: ignore[no-untyped-def]
        clean_db, settings, broker, caplog) -> None:
    engine = db.create_engine(settings, pool_size=1)
    try:
        first = sweep(engine, broker)
        again = sweep(engine, broker)
        assert first is not None and first.timeline is not None
        assert first.timeline.failover is False  # the first one recorded: the start
        assert again is not None and again.timeline is None
        # The server now writes on a timeline recorded after another: staged by
        # renaming the recorded one, as a promoted standby's table would show it.
        with clean_db.begin() as conn:
            conn.execute(sa.text("UPDATE database_timelines SET timeline_id = timeline_id "
                                 "+ 1000, first_seen_at = now() - interval '1 day'"))
        with caplog.at_level(logging.WARNING, logger="webhooks.clock.sweep"):
            seen = sweep(engine, broker)
            assert sweep(engine, broker).timeline is None  # type: ignore[union-attr]
    finally:
        engine.dispose()
    assert seen is not None and seen.timeline is not None and seen.timeline.failover
    assert seen.timeline.timeline_id == current_timeline(clean_db)
    assert [r.message for r in caplog.records if r.levelno == logging.WARNING] == [
        "database failover: a new timeline; reconciling after it"]
    metrics = create_app(settings).test_client().get("/metrics").get_data(as_text=True)
    assert "webhooks_database_failovers_total 1.0" in metrics


def stripe_window(fake: FakeProviderApis, failover_ago: timedelta) -> list[str]:
    """Events the fake Stripe API has: two within the window before the failover (one of
    them 70 hours before it, older than the periodic run's margin) and one before it."""
    failover_at = datetime.now(UTC) - failover_ago
    created = [failover_at - timedelta(hours=70), failover_at - timedelta(seconds=5),
               failover_at - timedelta(hours=HOURS + 1)]
    events = [stripe_invoice_paid(n, int(when.timestamp())) for n, when in enumerate(created)]
    serve_stripe(fake, events, history=False)
    return [event["id"] for event in events[:2]]


def recorded(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text(
            "SELECT event_id, received_via FROM webhook_events")).all())


def test_the_clock_reconciles_the_window_before_a_failover_once(  # type: ignore[no-untyped-def]
        clean_db, settings, broker) -> None:
    with FakeProviderApis() as fake:
        within = stripe_window(fake, timedelta(minutes=1))
        api = dataclasses.replace(settings, default_options={"stripe": {"api_key": STRIPE_KEY}},
                                  api_bases={"stripe": fake.url}, reconcile_interval_seconds=0.0)
        engine = db.create_engine(api, pool_size=1, autocommit=True)
        try:
            # Nothing recorded: no failover, no run.
            assert schedule.reconcile_after_failover(api, engine, broker) == []
            timeline = stage_failover(clean_db, ago=timedelta(minutes=1))
            fake.state.fail_after = 0  # the API is down at the first try
            [failed] = schedule.reconcile_after_failover(api, engine, broker)
            assert failed.error is not None and recorded(clean_db) == {}
            fake.state.fail_after = None
            [result] = schedule.reconcile_after_failover(api, engine, broker)
            assert result.error is None
            requests = sum(fake.state.requests.values())
            assert schedule.reconcile_after_failover(api, engine, broker) == []  # done
            assert sum(fake.state.requests.values()) == requests
        finally:
            engine.dispose()
    assert recorded(clean_db) == dict.fromkeys(within, "reconcile")
    assert scalar(clean_db, "SELECT provider FROM failover_reconciles WHERE timeline_id = "
                  ":t", t=timeline) == "stripe"
    assert scalar(clean_db, "SELECT last_success_at IS NOT NULL FROM reconcile_runs")


def test_no_reconciliation_after_the_window(clean_db, settings, broker) -> None:  # type: ignore[no-untyped-def]
    with FakeProviderApis() as fake:
        stripe_window(fake, timedelta(hours=HOURS + 1))
        api = dataclasses.replace(settings, default_options={"stripe": {"api_key": STRIPE_KEY}},
                                  api_bases={"stripe": fake.url})
        stage_failover(clean_db, ago=timedelta(hours=HOURS + 1))
        engine = db.create_engine(api, pool_size=1, autocommit=True)
        try:
            assert schedule.reconcile_after_failover(api, engine, broker) == []
        finally:
            engine.dispose()
        assert sum(fake.state.requests.values()) == 0


def test_a_clock_with_periodic_runs_off_reconciles_after_a_failover(  # type: ignore[no-untyped-def]
        clean_db, settings, tmp_path: Path) -> None:
    """The real `webhooks clock`, RECONCILE_INTERVAL_SECONDS=0: its sweep sees the new
    timeline and it reconciles within a minute; restarted, it does not reconcile again."""
    with FakeProviderApis() as fake:
        within = stripe_window(fake, timedelta(seconds=0))
        now_on = current_timeline(clean_db)
        with clean_db.begin() as conn:  # the start, on an older timeline
            conn.execute(sa.text("INSERT INTO database_timelines (timeline_id, failover, "
                                 "first_seen_at) VALUES (:t, false, now() - interval '1 day')"),
                         {"t": now_on + 1000})
        env = {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
               "STRIPE_API_KEY": STRIPE_KEY, "STRIPE_API_BASE": fake.url,
               "RECONCILE_INTERVAL_SECONDS": "0", "SWEEP_INTERVAL_SECONDS": "0.5"}
        log = tmp_path / "clock.log"
        clock = processes.start(["clock"], env, log)
        started = time.monotonic()
        try:
            processes.wait_until(lambda: recorded(clean_db) == dict.fromkeys(within, "reconcile"),
                                 timeout=60)
            took = time.monotonic() - started
            processes.wait_until(lambda: scalar(clean_db, "SELECT count(*) FROM "
                                                "failover_reconciles") == 1, timeout=30)
        finally:
            processes.stop(clock)
        requests = sum(fake.state.requests.values())
        again = processes.start(["clock"], env, log)
        try:
            processes.wait_until(lambda: log.read_text().count("clock started") == 2, 30)
            time.sleep(2)  # several sweeps and after-failover ticks
        finally:
            processes.stop(again)
        assert sum(fake.state.requests.values()) == requests, log.read_text()[-3000:]
    assert "database failover: a new timeline" in log.read_text()
    print(f"\nafter a failover: reconciled {took:.1f}s after the clock started")


@pytest.fixture()
def postmark() -> Iterator[tuple[FakePostmark, PostmarkSender]]:
    with FakePostmark() as fake:
        yield fake, PostmarkSender(fake.token, fake.url, "billing@example.com", timeout=2)


def record_start(engine: Engine) -> None:
    """What the clock's first sweep records (failover.record_timeline): the server's
    timeline, the start."""
    with engine.begin() as conn:
        started = failover.record_timeline(conn)
    assert started is not None and not started.failover


def timelines(engine: Engine) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(
            "SELECT timeline_id, failover, first_seen_at FROM database_timelines"))]


def lose_sent_marks(engine: Engine) -> None:
    """What an asynchronous standby shows after a failover: the rows as they were
    before their send was marked, at their first attempt again."""
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE outbox SET status = 'pending', attempts = 0, "
                             "message_id = NULL, sent_at = NULL, run_at = now()"))


def test_within_the_window_every_first_send_is_searched_first(  # type: ignore[no-untyped-def]
        clean_db, settings, postmark) -> None:
    fake, sender = postmark
    keys = insert_emails(clean_db, 3)
    record_start(clean_db)
    outbox.dispatch_due(clean_db, settings, sender=sender)
    assert fake.requests("GET /messages/outbound") == 0  # no failover: no search
    lose_sent_marks(clean_db)
    stage_failover(clean_db, ago=timedelta(hours=HOURS - 1))

    result = outbox.dispatch_due(clean_db, settings, sender=sender)

    assert (result.claimed, result.sent) == (3, 3)
    assert fake.requests("GET /messages/outbound") == 3
    assert fake.requests("POST /email/batch") == 1  # the first dispatch's only
    assert_one_message_per_key(fake, clean_db, keys)
    assert all(row.attempts == 1 for row in rows(clean_db))


@pytest.mark.parametrize("recorded_before", ["the old primary's timeline", "nothing"])
def test_a_timeline_not_recorded_yet_is_searched_before_the_sweep(  # type: ignore[no-untyped-def]
        clean_db, settings, postmark, recorded_before) -> None:
    """A promoted standby before the clock's next sweep: the table has no row for the
    timeline the server writes on now, and no failover row. The dispatcher does not wait
    for the clock: it searches before every first send, and records nothing (the clock
    does, with its notification). With nothing recorded at all it cannot tell a new
    database from a lost first row, and searches too."""
    fake, sender = postmark
    keys = insert_emails(clean_db, 3)
    record_start(clean_db)
    outbox.dispatch_due(clean_db, settings, sender=sender)
    assert fake.requests("GET /messages/outbound") == 0  # the timeline recorded: no search
    lose_sent_marks(clean_db)
    with clean_db.begin() as conn:  # the table as the old primary's clock left it
        conn.execute(sa.text("UPDATE database_timelines SET timeline_id = timeline_id + 1000, "
                             "first_seen_at = now() - interval '30 days'"))
        if recorded_before == "nothing":
            conn.execute(sa.text("DELETE FROM database_timelines"))
    before = timelines(clean_db)

    result = outbox.dispatch_due(clean_db, settings, sender=sender)

    assert (result.claimed, result.sent) == (3, 3)
    assert fake.requests("GET /messages/outbound") == 3
    assert fake.requests("POST /email/batch") == 1  # the first dispatch's only
    assert_one_message_per_key(fake, clean_db, keys)
    assert timelines(clean_db) == before  # the dispatcher recorded nothing


def test_after_the_window_first_sends_are_not_searched(  # type: ignore[no-untyped-def]
        clean_db, settings, postmark) -> None:
    fake, sender = postmark
    stage_failover(clean_db, ago=timedelta(hours=HOURS + 1))
    keys = insert_emails(clean_db, 3)

    result = outbox.dispatch_due(clean_db, settings, sender=sender)

    assert result.sent == 3
    assert fake.requests("GET /messages/outbound") == 0
    assert_one_message_per_key(fake, clean_db, keys)
