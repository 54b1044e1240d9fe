"""shared.redis_broker on a real Redis: a consumer hears a new message (or an ack that makes
room) at once, where dramatiq's own Redis consumer sleeps between polls, up to its timeout;
and an idle consumer, a delay queue's too, fetches about once per IDLE_WAIT_SECONDS, not
once per worker timeout."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest

from webhooks.shared import wakeups
from webhooks.shared.redis_broker import IDLE_WAIT_SECONDS, NoticedRedisBroker
from webhooks.shared.settings import Settings

TIMEOUT_MS = 10_000  # an idle poll would sleep up to this long
WORKER_TIMEOUT_MS = 100  # what `webhooks worker` gives Dramatiq (dramatiq_worker_timeout)


@pytest.fixture()
def brokers(settings: Settings) -> Iterator[tuple[NoticedRedisBroker, NoticedRedisBroker]]:
    """Two brokers on one Redis: a worker process's and a web process's."""
    worker, web = wakeups.create_broker(settings), wakeups.create_broker(settings)
    if not isinstance(worker, NoticedRedisBroker) or not isinstance(web, NoticedRedisBroker):
        pytest.skip("BROKER_URL is not Redis")
    worker.flush(wakeups.JOBS_QUEUE)
    yield worker, web
    worker.flush(wakeups.JOBS_QUEUE)


def _wake(broker: dramatiq.Broker, job_id: int) -> None:
    assert wakeups.wake_jobs(broker, [job_id])


def _next_message(consumer: Any, deadline: float) -> Any:
    while time.monotonic() < deadline:
        message = next(consumer)
        if message is not None:
            return message
    return None


def _receive_in_background(consumer: Any) -> tuple[threading.Thread, dict[str, Any]]:
    got: dict[str, Any] = {}

    def receive() -> None:
        got["message"] = _next_message(consumer, time.monotonic() + 3 * TIMEOUT_MS / 1000)
        got["at"] = time.monotonic()

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    return thread, got


def test_an_idle_consumer_fetches_a_new_message_at_once(brokers) -> None:  # type: ignore[no-untyped-def]
    worker, web = brokers
    consumer = worker.consume(wakeups.JOBS_QUEUE, prefetch=2, timeout=TIMEOUT_MS)
    thread, got = _receive_in_background(consumer)
    # Idle for 3 s: a polling consumer's sleeps would have grown to seconds by now.
    time.sleep(3)
    enqueued_at = time.monotonic()
    _wake(web, 7)
    thread.join(TIMEOUT_MS / 1000 + 5)
    assert got["message"] is not None and got["message"].args == (7,)
    assert got["at"] - enqueued_at < 0.25
    consumer.ack(got["message"])
    consumer.close()


def test_a_consumer_with_no_room_takes_the_next_message_when_one_is_acked(brokers) -> None:  # type: ignore[no-untyped-def]
    worker, web = brokers
    consumer = worker.consume(wakeups.JOBS_QUEUE, prefetch=1, timeout=TIMEOUT_MS)
    _wake(web, 1)
    first = _next_message(consumer, time.monotonic() + 5)
    assert first is not None
    _wake(web, 2)  # no room: prefetch 1, and the first one is still running
    thread, got = _receive_in_background(consumer)
    time.sleep(1)
    assert "message" not in got
    acked_at = time.monotonic()
    consumer.ack(first)
    thread.join(TIMEOUT_MS / 1000 + 5)
    assert got["message"] is not None and got["message"].args == (2,)
    assert got["at"] - acked_at < 0.25
    consumer.ack(got["message"])
    consumer.close()


@pytest.mark.parametrize("queue", [wakeups.JOBS_QUEUE, f"{wakeups.JOBS_QUEUE}.DQ"])
def test_an_idle_consumer_fetches_once_per_idle_wait(brokers, monkeypatch, queue) -> None:  # type: ignore[no-untyped-def]
    worker, _ = brokers
    fetches: list[float] = []
    fetch = worker.do_fetch

    def counted(queue_name: str, count: int) -> Any:
        fetches.append(time.monotonic())
        return fetch(queue_name, count)

    monkeypatch.setattr(worker, "do_fetch", counted)
    consumer = worker.consume(queue, prefetch=2, timeout=WORKER_TIMEOUT_MS)
    started = time.monotonic()
    while time.monotonic() - started < 5 * IDLE_WAIT_SECONDS:
        assert next(consumer) is None
    consumer.close()
    # Past a delay queue's first, growing backoffs: at most one fetch per idle wait, where
    # one per worker timeout would be ten times as many. A delay queue is dramatiq's own
    # polling consumer, whose backoff at its cap is drawn between half and all of it
    # (dramatiq.common.compute_backoff's jitter): at most one fetch per half idle wait.
    settled = [at for at in fetches if at - started >= 2 * IDLE_WAIT_SECONDS]
    most = 6 if queue.endswith(".DQ") else 4
    assert 1 <= len(settled) <= most, fetches
