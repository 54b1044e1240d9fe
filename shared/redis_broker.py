"""Dramatiq's Redis broker, with consumers that hear new messages instead of polling for them.

Dramatiq's RedisBroker fetches with a Lua script that cannot block, so an idle consumer
sleeps between fetches, 5 ms doubling up to the worker timeout, and a consumer whose
prefetch is full sleeps the same way until an ack makes room: a wake-up waited for the
sleep to end (the latency this saves: benchmarks/results/README.md).

Here every enqueue also PUBLISHes on the queue's channel. One thread per worker process
listens to the channels; an idle consumer waits for a notice (up to IDLE_WAIT_SECONDS) and
fetches as soon as one arrives. Notices are hints: a lost one (a dropped subscription, a
publish that failed) costs at most IDLE_WAIT_SECONDS, and the message itself is enqueued
first, so a consumer that hears the notice finds it. The listener, after it subscribes
again, wakes every consumer.

An idle consumer that fetched every worker timeout would keep an idle worker busy (a Lua
script per queue, ten times a second, in every process); it fetches once per
IDLE_WAIT_SECONDS instead. So does a delay queue's consumer (retries with a backoff):
a retry's wake-up arrives at most that much after its backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import dramatiq
import redis
from dramatiq.broker import Consumer
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer

log = logging.getLogger(__name__)

RESUBSCRIBE_SECONDS = 1.0  # after the subscription failed (Redis down): try again this often
LISTEN_SECONDS = 1.0  # the longest one read of the subscription waits
# The longest an idle consumer waits between fetches without a notice (and a delay queue's
# consumer between polls); also the most a stopping consumer takes to notice it should.
IDLE_WAIT_SECONDS = 1.0


class NoticedRedisBroker(RedisBroker):
    """RedisBroker whose enqueues publish a notice and whose consumers wait for one."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._notices: dict[str, threading.Event] = {}
        self._listener: threading.Thread | None = None
        self._listener_lock = threading.Lock()

    def channel(self, queue_name: str) -> str:
        return f"{self.namespace}:{queue_name}.notice"

    def enqueue(self, message: dramatiq.Message, *, delay: int | None = None) -> dramatiq.Message:  # type: ignore[type-arg]
        enqueued = super().enqueue(message, delay=delay)
        if delay is None:  # a delayed message is moved to its queue by enqueue(), later
            try:
                self.client.publish(self.channel(message.queue_name), b"")
            except redis.RedisError as error:  # the message is in: it waits one poll at most
                log.debug("notice not published: %s", error)
        return enqueued

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> Consumer:
        timeout = max(timeout, int(IDLE_WAIT_SECONDS * 1000))  # the consumer's longest wait
        notice = self._notice(queue_name)
        if notice is None:  # a delay queue (retries with a backoff): polling is fine
            return super().consume(queue_name, prefetch, timeout)
        return _NoticedConsumer(self, queue_name, prefetch, timeout, notice)

    def _notice(self, queue_name: str) -> threading.Event | None:
        if queue_name not in self.queues or queue_name.endswith(".DQ"):
            return None
        with self._listener_lock:
            if self._listener is None:
                canonical = sorted(q for q in self.queues if not q.endswith(".DQ"))
                self._notices = {self.channel(q): threading.Event() for q in canonical}
                self._listener = threading.Thread(target=self._listen, daemon=True,
                                                  name="broker-notices")
                self._listener.start()
        return self._notices.get(self.channel(queue_name))

    def _listen(self) -> None:
        """Set the queue's event on each notice, for ever; resubscribe after errors."""
        channels = list(self._notices)
        while True:
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(*channels)
                for event in self._notices.values():
                    event.set()  # anything published while we were not listening
                while True:
                    notice = pubsub.get_message(timeout=LISTEN_SECONDS)
                    if notice is not None:
                        channel = notice["channel"]
                        name = channel.decode() if isinstance(channel, bytes) else channel
                        if name in self._notices:
                            self._notices[name].set()
            except Exception as error:  # the consumers poll meanwhile, as without notices
                expected = isinstance(error, redis.RedisError | OSError)  # Redis down
                log.log(logging.DEBUG if expected else logging.WARNING,
                        "broker notices interrupted: %s", error)
                time.sleep(RESUBSCRIBE_SECONDS)
            finally:
                try:
                    pubsub.close()
                except (redis.RedisError, OSError):
                    pass


class _NoticedConsumer(_RedisConsumer):  # type: ignore[misc]
    """An idle consumer waits for its queue's notice (or IDLE_WAIT_SECONDS), not a sleep;
    one whose prefetch is full waits for an ack the same way."""

    def __init__(self, broker: NoticedRedisBroker, queue_name: str, prefetch: int,
                 timeout: int, notice: threading.Event) -> None:
        super().__init__(broker, queue_name, prefetch, timeout)
        self.notice = notice

    def __next__(self) -> Any:
        if self.message_cache:
            return super().__next__()
        self.notice.clear()  # before looking: a notice from now on is not missed
        room = self.prefetch - self.outstanding_message_count
        if room > 0:
            try:
                self.message_cache = self.broker.do_fetch(self.queue_name, room)
            except redis.ConnectionError as error:
                raise dramatiq.errors.ConnectionClosed(error) from None
            if self.message_cache:
                return super().__next__()
        # Nothing due, or no room until a running message is acked: wait for either.
        self.notice.wait(self.timeout / 1000)
        return None

    def ack(self, message: Any) -> None:
        try:
            super().ack(message)
        finally:
            self.notice.set()  # room for another message

    def nack(self, message: Any) -> None:
        try:
            super().nack(message)
        finally:
            self.notice.set()
