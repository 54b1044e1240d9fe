"""One request budget for every Stripe call of a process: a token bucket that reconciliation
(every source and connected account) and the worker's thin-event fetches draw from.

Why: Stripe limits an account's API traffic (100 requests a second in live mode, and 25 a
second on some endpoints, `GET /v1/events` among them), and a Connect source's
reconciliation lists every connected account's events in a row: without a shared bound,
a platform with many accounts would run into 429s, and its other calls (the thin-event
fetches that jobs wait on) with it. So every Stripe client of the process is built with
`http_client()`, whose requests wait for a token first: REQUESTS_PER_SECOND, with BURST
saved after an idle moment (one: no second ever sees more than the rate and one). A 429
that still comes (another process spends the same account's limit) is honoured by the
caller: its Retry-After, else a backoff (shared/providers/stripe_events.py `_get`), never
an immediate retry; the library's own retries go through the bucket too.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import stripe as stripe_sdk

REQUESTS_PER_SECOND = 25.0  # Stripe's per-endpoint limit, the lowest that applies
BURST = 1  # saved requests: one, so the requests of any second stay within the rate


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved; take() waits for one. Thread-safe:
    the worker's threads and a clock's runs share one."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:  # held while waiting: takers are served one at a time, in turn
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens < 1:
                time.sleep((1 - self._tokens) / self.rate)
                self._tokens, self._at = 1.0, time.monotonic()
            self._tokens -= 1


BUCKET = TokenBucket(REQUESTS_PER_SECOND, BURST)  # the process's one budget


class BudgetedRequestsClient(stripe_sdk.RequestsClient):
    """The `stripe` library's requests client, each request after a token of BUCKET."""

    def request(self, *args: Any, **kwargs: Any) -> Any:
        BUCKET.take()
        return super().request(*args, **kwargs)


def http_client(timeout: float | None = None) -> stripe_sdk.RequestsClient:
    """An HTTP client for a StripeClient, within the process's budget."""
    if timeout is None:
        return BudgetedRequestsClient()
    return BudgetedRequestsClient(timeout=timeout)


@functools.lru_cache(maxsize=16)
def client(api_key: str, api_base: str, timeout: float) -> stripe_sdk.StripeClient:
    """One StripeClient per key, base and timeout in a process (the thin-event fetches',
    the calls'): its HTTP connections reused, its requests within the process's budget,
    the library's own retries off (the caller's are the retries)."""
    return stripe_sdk.StripeClient(api_key, base_addresses={"api": api_base},
                                   max_network_retries=0, http_client=http_client(timeout))
