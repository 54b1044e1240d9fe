"""The outbox dispatcher against a real Postgres and the fake Postmark over real HTTP,
through the real postmarker client. Every fault ends with one message per key.

"Run to completion" = dispatch, then expire every lease and backoff (run_at = now()) and
dispatch again, until no row is pending.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY
from sqlalchemy.engine import Engine

from tests.fakes.postmark_server import FakePostmark
from webhooks.shared import failover
from webhooks.shared.errors import EmailOutcomeUnknown
from webhooks.shared.settings import Settings
from webhooks.worker import outbox, postmark
from webhooks.worker.postmark import PostmarkSender, Sent

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 0.3  # the client's; the fake's slow answers take longer


@pytest.fixture()
def fake() -> Iterator[FakePostmark]:
    with FakePostmark() as server:
        yield server


@pytest.fixture(autouse=True)
def timeline_recorded(clean_db: Engine) -> None:
    """The server's timeline recorded as the clock's first sweep records it, as in
    production: no failover, so first sends are not searched (with no row, the dispatcher
    cannot tell a new database from a failover and searches: shared/failover.py)."""
    with clean_db.begin() as conn:
        failover.record_timeline(conn)


@pytest.fixture()
def mail_settings(settings: Settings, fake: FakePostmark, clean_db: Engine) -> Settings:
    return dataclasses.replace(settings, postmark_server_token=fake.token,
                               postmark_api_url=fake.url, job_max_attempts=6)


@pytest.fixture()
def sender(mail_settings: Settings) -> PostmarkSender:
    assert mail_settings.postmark_server_token
    return PostmarkSender(mail_settings.postmark_server_token, mail_settings.postmark_api_url,
                          mail_settings.email_from, timeout=TIMEOUT)


def insert_emails(engine: Engine, count: int, *, to: str = "buyer@example.com",
                  prefix: str = "receipt:in") -> list[str]:
    keys = [f"{prefix}_{i}" for i in range(count)]
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO outbox (idempotency_key, kind, to_address, subject, text_body,"
                    " html_body) VALUES (:key, 'receipt', :to, 'Receipt', 'Thanks.',"
                    " '<p>Thanks.</p>')"),
            [{"key": key, "to": to} for key in keys],
        )
    return keys


def rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(
            "SELECT idempotency_key, status, attempts, message_id, last_error,"
            " run_at > now() AS leased FROM outbox ORDER BY id")))


def expire_leases(engine: Engine) -> int:
    with engine.begin() as conn:
        return conn.execute(sa.text(
            "UPDATE outbox SET run_at = now() WHERE status = 'pending'")).rowcount


def drain(engine: Engine, settings: Settings, sender: Any, rounds: int = 20) -> None:
    for _ in range(rounds):
        while outbox.dispatch_due(engine, settings, sender=sender).more:
            pass
        if not expire_leases(engine):
            return
    raise AssertionError("the outbox did not drain")


def assert_one_message_per_key(fake: FakePostmark, engine: Engine, keys: list[str]) -> None:
    assert fake.by_key() == {key: 1 for key in keys}
    recorded = {m["Metadata"]["idempotency_key"]: m["MessageID"]
                for m in fake.snapshot()["messages"]}
    for row in rows(engine):
        assert row.status == "sent"
        assert row.message_id == recorded[row.idempotency_key]


def sent_total() -> float:
    return REGISTRY.get_sample_value("webhooks_outbox_sent_total") or 0.0


def test_due_emails_are_sent_in_one_batch_and_marked_with_their_message_id(
        clean_db, mail_settings, sender, fake):
    keys = insert_emails(clean_db, 5)
    before = sent_total()

    result = outbox.dispatch_due(clean_db, mail_settings, sender=sender)

    assert (result.sent, result.failed, result.retried, result.more) == (5, 0, 0, False)
    assert fake.requests("POST /email/batch") == 1
    assert fake.requests("GET /messages/outbound") == 0  # first attempts are not searched
    assert_one_message_per_key(fake, clean_db, keys)
    assert all(row.attempts == 1 for row in rows(clean_db))
    assert sent_total() - before == 5


def test_a_full_batch_says_there_is_more(clean_db, mail_settings, sender, fake):
    insert_emails(clean_db, 5)

    first = outbox.dispatch_due(clean_db, mail_settings, limit=3, sender=sender)
    second = outbox.dispatch_due(clean_db, mail_settings, limit=3, sender=sender)

    assert (first.sent, first.more, second.sent, second.more) == (3, True, 2, False)


def test_without_a_token_emails_are_logged_and_marked_sent(clean_db, settings, caplog):
    [key] = insert_emails(clean_db, 1)

    with caplog.at_level("INFO"):
        result = outbox.dispatch_due(clean_db, settings)

    assert result.sent == 1
    [row] = rows(clean_db)
    assert (row.status, row.message_id) == ("sent", f"console-{key}")
    assert "Thanks." not in caplog.text  # the body is not logged at INFO


@pytest.mark.parametrize("mode", ["fail_first", "error_after_accept", "drop_after_accept",
                                  "slow_after_accept"])
def test_every_fault_ends_with_one_message_per_key(clean_db, mail_settings, sender, fake, mode):
    keys = insert_emails(clean_db, 4)
    fake.set_mode(**{mode: 2}, delay=TIMEOUT + 0.4)

    first = outbox.dispatch_due(clean_db, mail_settings, sender=sender)
    assert (first.sent, first.retried) == (0, 4)
    assert all(row.status == "pending" and row.last_error for row in rows(clean_db))
    drain(clean_db, mail_settings, sender)

    assert_one_message_per_key(fake, clean_db, keys)


def test_an_unanswered_send_is_found_by_search_and_not_sent_again(
        clean_db, mail_settings, sender, fake):
    keys = insert_emails(clean_db, 3)
    fake.set_mode(drop_after_accept=1)
    outbox.dispatch_due(clean_db, mail_settings, sender=sender)
    expire_leases(clean_db)

    result = outbox.dispatch_due(clean_db, mail_settings, sender=sender)

    assert result.sent == 3
    assert fake.requests("GET /messages/outbound") == 3
    assert fake.requests("POST /email/batch") == 1  # only the first, unanswered one
    assert_one_message_per_key(fake, clean_db, keys)
    assert all(row.attempts == 2 for row in rows(clean_db))


def test_a_retry_waits_for_its_backoff(clean_db, mail_settings, sender, fake):
    insert_emails(clean_db, 1)
    fake.set_mode(fail_first=1)
    outbox.dispatch_due(clean_db, mail_settings, sender=sender)

    again = outbox.dispatch_due(clean_db, mail_settings, sender=sender)

    assert again.claimed == 0  # at least retries.EMAIL_MIN_DELAY_SECONDS, though the base is 0
    [row] = rows(clean_db)
    assert row.leased and "500" in row.last_error


def test_an_invalid_address_fails_at_once_and_is_never_retried(
        clean_db, mail_settings, sender, fake):
    [bad] = insert_emails(clean_db, 1, to="invalid@example", prefix="bad")
    good = insert_emails(clean_db, 2)

    result = outbox.dispatch_due(clean_db, mail_settings, sender=sender)
    expire_leases(clean_db)
    drain(clean_db, mail_settings, sender)

    assert (result.sent, result.failed, result.retried) == (2, 1, 0)
    by_key = {row.idempotency_key: row for row in rows(clean_db)}
    assert (by_key[bad].status, by_key[bad].attempts) == ("failed", 1)
    assert "[300]" in by_key[bad].last_error
    assert fake.by_key() == {key: 1 for key in good}
    assert fake.requests("POST /email/batch") == 1
    assert fake.requests("POST /email") == 0


def test_an_inactive_recipient_alone_fails_at_once(clean_db, mail_settings, sender, fake):
    insert_emails(clean_db, 1, to="inactive@example.com")

    result = outbox.dispatch_due(clean_db, mail_settings, sender=sender)
    drain(clean_db, mail_settings, sender)

    assert result.failed == 1
    [row] = rows(clean_db)
    assert (row.status, row.attempts) == ("failed", 1) and "[406]" in row.last_error
    assert fake.requests("POST /email") == 1


def test_exhausted_attempts_fail_the_email(clean_db, mail_settings, sender, fake):
    settings = dataclasses.replace(mail_settings, job_max_attempts=3)
    insert_emails(clean_db, 1)
    fake.set_mode(fail_first=100)

    drain(clean_db, settings, sender)

    [row] = rows(clean_db)
    assert (row.status, row.attempts) == ("failed", 3)
    assert "500" in row.last_error
    assert fake.by_key() == {}
    assert fake.requests("POST /email") == 1  # then two searches, neither answered
    assert fake.requests("GET /messages/outbound") == 2


def test_a_claimed_row_is_hidden_from_other_dispatchers_for_its_lease(
        clean_db, mail_settings, sender, fake):
    insert_emails(clean_db, 2)
    claimed, _ = outbox._claim(clean_db, 1, 72)  # a dispatcher now calling Postmark

    other = outbox.dispatch_due(clean_db, mail_settings, sender=sender)

    assert [row.attempts for row in claimed] == [1]
    assert (other.claimed, other.sent) == (1, 1)  # only the row not in flight
    with clean_db.connect() as conn:
        lease = conn.execute(sa.text(
            "SELECT extract(epoch FROM run_at - attempted_at) FROM outbox WHERE id = :id"),
            {"id": claimed[0].id}).scalar_one()
    assert lease == outbox.LEASE_SECONDS


def test_a_dispatcher_whose_lease_ran_out_cannot_touch_the_row(
        clean_db, mail_settings, sender, fake):
    [key] = insert_emails(clean_db, 1)
    [stale], _ = outbox._claim(clean_db, 10, 72)  # a dispatcher then stalling past its lease
    expire_leases(clean_db)
    current, _ = outbox._claim(clean_db, 10, 72)  # another takes over, still in flight
    assert [row.attempts for row in current] == [2]

    late = outbox.EmailRound()
    outbox._record(clean_db, mail_settings, [stale], {stale.id: EmailOutcomeUnknown("5xx")}, late)
    outbox._record(clean_db, mail_settings, [stale], {stale.id: Sent("late")}, late)

    assert (late.sent, late.retried) == (0, 0)
    [row] = rows(clean_db)  # still leased to the current holder, not made due again
    assert (row.status, row.attempts, row.leased, row.message_id) == ("pending", 2, True, None)
    expire_leases(clean_db)
    drain(clean_db, mail_settings, sender)
    assert_one_message_per_key(fake, clean_db, [key])


def test_rows_not_reached_before_the_deadline_are_given_back_unsent(
        clean_db, mail_settings, sender, fake, monkeypatch):
    insert_emails(clean_db, 2)
    monkeypatch.setattr(outbox, "SEND_DEADLINE_SECONDS", -1.0)

    result = outbox.dispatch_due(clean_db, mail_settings, sender=sender)

    assert (result.claimed, result.sent, result.more) == (2, 0, True)
    assert fake.snapshot()["requests"] == {}
    assert [(r.status, r.leased) for r in rows(clean_db)] == [("pending", False)] * 2


def test_two_dispatchers_racing_send_each_key_once(database_url, clean_db, mail_settings, fake):
    keys = insert_emails(clean_db, 200)
    barrier = threading.Barrier(2)
    sent: list[int] = []

    def dispatcher() -> None:
        engine = sa.create_engine(database_url, pool_size=2)
        own_sender = PostmarkSender(fake.token, fake.url, mail_settings.email_from)
        barrier.wait()
        while (result := outbox.dispatch_due(engine, mail_settings, limit=10,
                                             sender=own_sender)).claimed:
            sent.append(result.sent)
        engine.dispose()

    threads = [threading.Thread(target=dispatcher) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sum(sent) == 200
    assert_one_message_per_key(fake, clean_db, keys)


CHILD = """
import os, signal
from webhooks.shared import db
from webhooks.shared.errors import EmailOutcomeUnknown
from webhooks.shared.settings import Settings
from webhooks.worker import outbox

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

setattr(outbox, os.environ["KILL_AT"], die)
settings = Settings.from_env()
outbox.dispatch_due(db.create_engine(settings), settings)
raise SystemExit("still alive")
"""


@pytest.mark.parametrize("kill_at", ["_record", "_attempt"])  # after the send; before it
def test_a_dispatcher_killed_mid_send_leaves_one_message_per_key(
        database_url, clean_db, fake, kill_at):
    keys = insert_emails(clean_db, 3)
    env = {**os.environ, "DATABASE_URL": database_url, "POSTMARK_SERVER_TOKEN": fake.token,
           "POSTMARK_API_URL": fake.url, "KILL_AT": kill_at, "PYTHONPATH": str(ROOT)}

    child = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=ROOT, timeout=30,
                           capture_output=True, text=True)

    assert child.returncode == -9, child.stderr
    assert fake.by_key() == ({key: 1 for key in keys} if kill_at == "_record" else {})
    assert all(r.status == "pending" and r.attempts == 1 and r.leased for r in rows(clean_db))
    settings = Settings.from_env({"DATABASE_URL": database_url,
                                  "POSTMARK_SERVER_TOKEN": fake.token,
                                  "POSTMARK_API_URL": fake.url})
    assert outbox.dispatch_due(clean_db, settings).claimed == 0  # the lease still holds

    expire_leases(clean_db)
    result = outbox.dispatch_due(clean_db, settings, sender=postmark.sender_for(settings))

    assert result.sent == 3
    assert fake.requests("GET /messages/outbound") == 3
    assert_one_message_per_key(fake, clean_db, keys)
