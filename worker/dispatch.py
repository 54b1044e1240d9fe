"""What every dispatch of the worker shares: the emails (worker/outbox.py), the
notifications (worker/notify.py) and the calls to other APIs (worker/calls.py) are each a
leased claim-send-mark loop, after the transaction that queued them committed:

- the claim commits first (a lease, the attempt counted), so no request runs inside a
  transaction and a dispatcher that dies leaves its rows to come back when the lease ends;
- each request's outcome is one of three (Outcome): Sent, Refused (the receiver said no:
  the same request would get the same answer) or Unknown (no answer, a 5xx, a 429...: it
  may or may not have taken effect);
- what follows an outcome is one rule for all (next_step): sent; failed; retried with
  backoff; or, for a channel whose receiver keeps an idempotency key for a lifetime (a
  call), ambiguous once a retry could no longer be deduplicated. What makes a retry safe
  is the channel's own: Postmark's messages are searched by their key before a retry
  sends (outbox), a notification's receiver dedups on its `webhook-id`, a call's target on
  its `Idempotency-Key`;
- each mark is guarded by the claimed attempt (a dispatcher whose lease ran out marks
  nothing);
- a wake-up runs rounds while they claim anything, for a bounded time (rounds), then a
  fresh message carries on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhooks.worker.retries import Retries


@dataclass(frozen=True)
class Sent:
    """The receiver took it; `answer`: what it said (a Postmark message id, a call's body)."""

    answer: Any = None


@dataclass(frozen=True)
class Refused:
    """The receiver refused it: the same request would be refused again."""

    error: str
    answer: Any = None


@dataclass(frozen=True)
class Unknown:
    """No telling whether it took effect: no answer, a timeout, a 5xx, a 429, a 409."""

    error: str
    retry_after: float = 0.0  # what the receiver asked for (Retry-After), seconds


Outcome = Sent | Refused | Unknown
MAX_RETRY_AFTER_SECONDS = 3600.0


class Step(StrEnum):
    """What a row becomes after an attempt."""

    SENT = "sent"
    FAILED = "failed"
    RETRIED = "retried"  # pending again, after `delay`
    AMBIGUOUS = "ambiguous"  # unknown, and past what the receiver dedups: for a person
    RELEASED = "released"  # not attempted before the round's deadline: due again at once


@dataclass(frozen=True)
class Next:
    step: Step
    delay: float = 0.0
    error: str | None = None


def next_step(outcome: Outcome | None, attempts: int, policy: Retries, *,
              key_age: float | None = None, lifetime: float | None = None) -> Next:
    """What follows an attempt, for every channel. `attempts`: those made, this one
    included. Without a `lifetime` an unknown outcome is retried until the attempts are
    exhausted, then failed; with one (the seconds the receiver keeps the idempotency key,
    from its first use, `key_age` ago), it is retried while the retry would still fall
    within the lifetime, whatever the attempts, and is ambiguous past it."""
    if outcome is None:
        return Next(Step.RELEASED, 0.0, "not attempted: the dispatcher ran out of time")
    if isinstance(outcome, Sent):
        return Next(Step.SENT)
    if isinstance(outcome, Refused):
        return Next(Step.FAILED, error=outcome.error)
    delay = max(policy.delay(attempts), min(outcome.retry_after, MAX_RETRY_AFTER_SECONDS))
    if lifetime is not None:
        if (key_age or 0.0) + delay >= lifetime:
            return Next(Step.AMBIGUOUS, error=outcome.error)
        return Next(Step.RETRIED, delay, outcome.error)
    if policy.exhausted(attempts):
        return Next(Step.FAILED, error=outcome.error)
    return Next(Step.RETRIED, delay, outcome.error)


def rounds(one_round: Callable[[], int], max_seconds: float,
           carry_on: Callable[[], object]) -> None:
    """Rounds while the last one claimed anything, for at most `max_seconds`; past them,
    `carry_on` (a fresh wake-up message) takes over."""
    deadline = time.monotonic() + max_seconds
    while one_round():
        if time.monotonic() > deadline:
            carry_on()
            return
