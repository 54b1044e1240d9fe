"""The one rule of every dispatch (worker/dispatch.py `next_step`): what follows an
attempt's outcome, for the emails and notifications (attempts bounded) and the calls (a
key's lifetime bounded)."""

from __future__ import annotations

from webhooks.worker import dispatch
from webhooks.worker.dispatch import Refused, Sent, Step, Unknown, next_step
from webhooks.worker.retries import UNLIMITED, Retries

EMAILS = Retries(max_attempts=3, base_seconds=2.0)
CALLS = Retries(max_attempts=UNLIMITED, base_seconds=2.0)


def test_sent_and_refused_end_whatever_the_attempts() -> None:
    assert next_step(Sent("pm_1"), 1, EMAILS).step is Step.SENT
    assert next_step(Refused("422"), 1, EMAILS) == dispatch.Next(Step.FAILED, error="422")
    assert next_step(Refused("400"), 1, CALLS, key_age=0, lifetime=86400).step is Step.FAILED


def test_an_unknown_outcome_is_retried_until_the_attempts_are_exhausted() -> None:
    retried = next_step(Unknown("timeout"), 1, EMAILS)
    assert retried.step is Step.RETRIED and 1.6 <= retried.delay <= 2.4
    assert next_step(Unknown("timeout"), 3, EMAILS) == dispatch.Next(Step.FAILED,
                                                                     error="timeout")


def test_with_a_lifetime_an_unknown_outcome_is_retried_within_it_then_ambiguous() -> None:
    assert next_step(Unknown("500"), 40, CALLS, key_age=60, lifetime=86400).step \
        is Step.RETRIED  # attempts do not count
    assert next_step(Unknown("500"), 1, CALLS, key_age=86399, lifetime=86400) == \
        dispatch.Next(Step.AMBIGUOUS, error="500")  # the retry would fall past it


def test_a_retry_after_is_honoured_up_to_an_hour() -> None:
    assert next_step(Unknown("429", retry_after=30), 1, CALLS, key_age=0,
                     lifetime=86400).delay == 30
    assert next_step(Unknown("429", retry_after=10**6), 1, CALLS, key_age=0,
                     lifetime=86400).delay == dispatch.MAX_RETRY_AFTER_SECONDS


def test_not_attempted_is_released_at_once() -> None:
    assert next_step(None, 2, EMAILS).step is Step.RELEASED
    assert next_step(None, 2, EMAILS).delay == 0


def test_rounds_run_while_they_claim_and_hand_over_past_their_time() -> None:
    claims, handed = iter([5, 5, 0]), []
    dispatch.rounds(lambda: next(claims), 60, lambda: handed.append(True))
    assert handed == []
    dispatch.rounds(lambda: 1, 0.01, lambda: handed.append(True))
    assert handed == [True]
