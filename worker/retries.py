"""When a failed attempt runs again, and after how many attempts it stops: for jobs
(worker/jobs.py) and for outbox emails (worker/outbox.py).

Emails retry on the jobs' settings, JOB_MAX_ATTEMPTS and JOB_RETRY_BASE_SECONDS:
`for_emails` is the one place that ties them together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from webhooks.shared.settings import Settings

MAX_DELAY_SECONDS = 3600.0
# An email is never retried sooner than this, whatever the base: the retry searches
# Postmark for the first attempt (worker/outbox.py), which must have had time to show.
EMAIL_MIN_DELAY_SECONDS = 1.0


@dataclass(frozen=True)
class Retries:
    max_attempts: int
    base_seconds: float
    min_delay_seconds: float = 0.0

    def exhausted(self, attempts: int) -> bool:
        """True when `attempts` attempts were all there may be."""
        return attempts >= self.max_attempts

    def delay(self, attempts: int, rng: random.Random | None = None) -> float:
        """Seconds before attempt `attempts + 1` (see retry_delay), at least the minimum."""
        return max(retry_delay(attempts, self.base_seconds, rng), self.min_delay_seconds)


def for_jobs(settings: Settings) -> Retries:
    return Retries(settings.job_max_attempts, settings.job_retry_base_seconds)


def for_emails(settings: Settings) -> Retries:
    """The jobs' attempts and base delay, never sooner than EMAIL_MIN_DELAY_SECONDS."""
    return Retries(settings.job_max_attempts, settings.job_retry_base_seconds,
                   EMAIL_MIN_DELAY_SECONDS)


def for_calls(settings: Settings) -> Retries:
    """The jobs' base delay, and no limit on attempts: a call's retries end with its key's
    lifetime (worker/dispatch.py `next_step`), not with a count."""
    return Retries(UNLIMITED, settings.job_retry_base_seconds)


UNLIMITED = 2**31 - 1


def retry_delay(attempts: int, base: float, rng: random.Random | None = None) -> float:
    """Seconds before attempt `attempts + 1`: base doubling per attempt, ±20% jitter,
    capped at an hour."""
    rng = rng or random.Random()
    exponent = min(max(attempts - 1, 0), 32)
    delay = min(base * (2**exponent), MAX_DELAY_SECONDS)
    return float(min(delay * rng.uniform(0.8, 1.2), MAX_DELAY_SECONDS))
