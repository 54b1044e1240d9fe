"""The Postmark wrapper against the fake Postmark over real HTTP (no database): what every
message carries, and how every kind of answer becomes Sent, EmailRejected or
EmailOutcomeUnknown."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest

from tests.fakes.postmark_server import FakePostmark
from webhooks.shared.errors import EmailOutcomeUnknown, EmailRejected
from webhooks.shared.settings import Settings
from webhooks.worker import postmark
from webhooks.worker.postmark import ConsoleSender, OutboundEmail, PostmarkSender, Sent

FROM = "billing@example.com"


@pytest.fixture()
def fake() -> Iterator[FakePostmark]:
    with FakePostmark() as server:
        yield server


def sender(fake: FakePostmark, timeout: float = 2.0) -> PostmarkSender:
    return PostmarkSender(fake.token, fake.url, FROM, timeout=timeout)


def email(key: str, to: str = "buyer@example.com") -> OutboundEmail:
    return OutboundEmail(idempotency_key=key, to=to, subject=f"Receipt {key}",
                         text_body=f"text {key}", html_body=f"<p>html {key}</p>")


def test_a_message_carries_its_key_in_metadata_and_the_outbound_stream(fake):
    [outcome] = sender(fake).send([email("receipt:in_1")])

    [recorded] = fake.snapshot()["messages"]
    assert outcome == Sent(recorded["MessageID"])
    assert recorded["Metadata"] == {"idempotency_key": "receipt:in_1"}
    assert recorded["MessageStream"] == "outbound"
    assert (recorded["From"], recorded["To"]) == (FROM, "buyer@example.com")
    assert recorded["Subject"] == "Receipt receipt:in_1"
    assert (recorded["TextBody"], recorded["HtmlBody"]) == ("text receipt:in_1",
                                                            "<p>html receipt:in_1</p>")
    assert fake.requests("POST /email") == 1


def test_a_batch_answers_each_message_on_its_own(fake):
    outcomes = sender(fake).send([email("a"), email("b", to="invalid@example"),
                                  email("c", to="inactive@example.com"), email("d")])

    assert fake.requests("POST /email/batch") == 1
    assert isinstance(outcomes[0], Sent) and isinstance(outcomes[3], Sent)
    assert isinstance(outcomes[1], EmailRejected) and "[300]" in str(outcomes[1])
    assert isinstance(outcomes[2], EmailRejected) and "[406]" in str(outcomes[2])
    assert fake.by_key() == {"a": 1, "d": 1}


def test_a_batch_refused_as_a_whole_is_sent_one_by_one(fake):
    fake.set_mode(batch_limit=2)

    outcomes = sender(fake).send([email("a"), email("b", to="invalid@x"), email("c")])

    assert [type(o) for o in outcomes] == [Sent, EmailRejected, Sent]
    assert fake.requests("POST /email") == 3
    assert fake.by_key() == {"a": 1, "c": 1}


@pytest.mark.parametrize("to, code", [("invalid@example", 300), ("inactive@example.com", 406)])
def test_a_recipient_that_cannot_receive_is_rejected(fake, to, code):
    [outcome] = sender(fake).send([email("k", to=to)])

    assert isinstance(outcome, EmailRejected)
    assert f"[{code}]" in str(outcome)


@pytest.mark.parametrize("mode", ["fail_first", "error_after_accept", "drop_after_accept",
                                  "slow_after_accept"])
def test_server_errors_and_lost_answers_are_unknown(fake, mode):
    fake.set_mode(**{mode: 1}, delay=0.6)

    [outcome] = sender(fake, timeout=0.2).send([email("k")])

    assert isinstance(outcome, EmailOutcomeUnknown)


def test_a_batch_without_an_answer_is_unknown_for_every_message(fake):
    fake.set_mode(drop_after_accept=1)

    outcomes = sender(fake).send([email("a"), email("b")])

    assert all(isinstance(o, EmailOutcomeUnknown) for o in outcomes)


def test_a_wrong_token_is_retried_not_rejected(fake):
    wrong = PostmarkSender("not-the-token", fake.url, FROM, timeout=2)

    [outcome] = wrong.send([email("k")])

    assert isinstance(outcome, EmailOutcomeUnknown)
    assert fake.by_key() == {}


def test_nothing_listening_is_unknown():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    closed = PostmarkSender("t", f"http://127.0.0.1:{port}", FROM, timeout=1)

    [outcome] = closed.send([email("k")])

    assert isinstance(outcome, EmailOutcomeUnknown)
    with pytest.raises(EmailOutcomeUnknown):
        closed.find_sent("k")


def test_the_search_finds_a_message_by_its_key_only(fake):
    client = sender(fake)
    [sent] = client.send([email("receipt:in_1")])
    client.send([email("receipt:in_2")])

    assert isinstance(sent, Sent)
    assert client.find_sent("receipt:in_1") == sent.message_id
    assert client.find_sent("receipt:in_3") is None


def test_a_failed_search_raises_unknown(fake):
    fake.set_mode(fail_first=1)

    with pytest.raises(EmailOutcomeUnknown):
        sender(fake).find_sent("k")


@pytest.mark.parametrize("status, code, rejected", [
    (422, 300, True),    # invalid email request
    (422, 406, True),    # inactive recipient
    (422, 402, True),    # invalid JSON: the same message fails again
    (422, 405, False),   # account out of credits
    (422, 401, False),   # sender signature not confirmed
    (401, 10, False),    # bad token
    (429, None, False),  # rate limited
    (500, None, False),
    (503, None, False),
])
def test_classify(status, code, rejected):
    outcome = postmark.classify(status, code, "reason")

    assert isinstance(outcome, EmailRejected if rejected else EmailOutcomeUnknown)


def test_without_a_token_emails_go_to_the_log(caplog):
    chosen = postmark.sender_for(Settings.from_env({}))
    assert isinstance(chosen, ConsoleSender)

    with caplog.at_level(logging.DEBUG, logger="webhooks.worker.postmark"):
        outcomes = chosen.send([email("receipt:in_9", to="someone@example.com"),
                                email("receipt:in_10", to="other@example.com")])

    assert outcomes == [Sent("console-receipt:in_9"), Sent("console-receipt:in_10")]
    # One INFO line per request, naming the first email; each email at DEBUG.
    [summary] = [r for r in caplog.records if r.levelno == logging.INFO]
    assert (summary.emails, summary.to) == (2, "someone@example.com")  # type: ignore[attr-defined]
    assert "text receipt:in_9" not in summary.getMessage() + str(vars(summary))
    each = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert [r.idempotency_key for r in each] == ["receipt:in_9", "receipt:in_10"]  # type: ignore[attr-defined]


def test_with_a_token_each_thread_reuses_one_client(fake):
    settings = Settings.from_env({"POSTMARK_SERVER_TOKEN": fake.token,
                                  "POSTMARK_API_URL": fake.url})

    first = postmark.sender_for(settings)

    assert isinstance(first, PostmarkSender)
    assert postmark.sender_for(settings) is first
