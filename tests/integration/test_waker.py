"""The web's wake-ups: sent off the request path, one message per burst, never raising."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from webhooks.ingest.waker import Waker
from webhooks.shared import wakeups
from webhooks.shared.settings import Settings

FAILURES = "webhooks_broker_enqueue_failures_total"


@pytest.fixture()
def jobs_queue(settings: Settings):  # type: ignore[no-untyped-def]
    broker = wakeups.create_broker(settings)
    broker.flush(wakeups.JOBS_QUEUE)
    yield broker
    broker.flush(wakeups.JOBS_QUEUE)


def test_a_burst_of_new_jobs_is_one_message_per_claim(settings, jobs_queue) -> None:  # type: ignore[no-untyped-def]
    waker = Waker(settings)
    waker._send(list(range(1, 121)))  # 120 ids arrived while the last message was sent
    assert wakeups.queued(jobs_queue, wakeups.JOBS_QUEUE) == 3  # 50 + 50 + 20


def test_wake_returns_at_once_and_every_burst_is_sent(settings, jobs_queue) -> None:  # type: ignore[no-untyped-def]
    waker = Waker(settings)
    started = time.perf_counter()
    for job_id in range(1, 301):
        waker.wake(job_id)
    queued_in = time.perf_counter() - started
    waker.close()
    messages = wakeups.queued(jobs_queue, wakeups.JOBS_QUEUE)
    assert messages is not None and 6 <= messages < 300  # at least one per 50, coalesced
    assert queued_in < 0.5


def test_broker_down_is_counted_not_raised(settings) -> None:  # type: ignore[no-untyped-def]
    down = Settings(**{**settings.__dict__, "broker_url": "redis://127.0.0.1:1/0"})
    before = REGISTRY.get_sample_value(FAILURES) or 0.0
    waker = Waker(down)
    for job_id in (1, 2, 3):
        waker.wake(job_id)
    waker.close(timeout=10)
    assert (REGISTRY.get_sample_value(FAILURES) or 0.0) - before == 3
