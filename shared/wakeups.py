"""Wake-ups: the Dramatiq messages that tell workers there is work, and the broker that
carries them (Redis for redis:// and unix://, RabbitMQ for amqp://).

Messages carry at most an id. The jobs and outbox tables are the truth, so a lost message
delays work (the clock's sweeper wakes a worker) and a duplicate finds nothing to claim.
The web, the worker, the clock and the `webhooks` command all send them; only the worker
(worker/actors.py) consumes them, under the actor and queue names defined here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    Pipelines,
    Retries,
    ShutdownNotifications,
    TimeLimit,
)

from webhooks.shared import db
from webhooks.shared.errors import DatabaseUnavailable
from webhooks.shared.redis_broker import NoticedRedisBroker
from webhooks.shared.settings import Settings

log = logging.getLogger(__name__)

JOBS_QUEUE = "jobs"
OUTBOX_QUEUE = "outbox"
PROCESS_JOBS = "process_jobs"
DISPATCH_OUTBOX = "dispatch_outbox"
# Notifications have their own queue and actor (worker/notify.py): a slow or failing Slack
# or webhook receiver never holds up the receipts' dispatch.
NOTIFY_QUEUE = "notifications"
DISPATCH_NOTIFICATIONS = "dispatch_notifications"
# Calls to other APIs (worker/calls.py): a queue of their own, so that a slow target never
# holds up the receipts or the notifications.
CALLS_QUEUE = "calls"
DISPATCH_CALLS = "dispatch_calls"
CALLS_PER_MESSAGE = 20
# A worker claims up to this many due jobs per wake-up; whoever makes jobs due sends one
# wake-up per this many (wake_jobs, wake_due_jobs, messages_for).
JOBS_PER_MESSAGE = 50
# A dispatch claims up to this many due emails (one Postmark batch request); the clock
# sends one wake-up per this many due emails.
EMAILS_PER_MESSAGE = 50


# A wake-up that found no database comes back a few times, 0.5 to 4 s apart, about 7 s in
# all: a failover, a restart or a dropped connection is over in seconds, and without this
# the work it woke for waited for the clock's next sweep (SWEEP_INTERVAL_SECONDS). Past
# that, or on any other error, it is dropped: the clock's sweeps take over.
UNAVAILABLE_RETRIES = 3
UNAVAILABLE_BACKOFF_MS = (1_000, 4_000)  # Dramatiq's min_backoff and max_backoff


def database_back(retries: int, error: BaseException) -> bool:
    """The Retries middleware's retry_when: True to send the failed wake-up again, later."""
    return retries < UNAVAILABLE_RETRIES and (isinstance(error, DatabaseUnavailable)
                                             or db.is_unavailable(error))


def create_broker(settings: Settings) -> dramatiq.Broker:
    """The broker of BROKER_URL; MissingVariable if it is unset."""
    settings.require_servers()
    url = settings.broker_url
    assert url is not None
    # The job row owns retries: Retries sends a wake-up again only when it found no
    # database (database_back).
    middleware = [
        AgeLimit(),
        TimeLimit(),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        Retries(retry_when=database_back, min_backoff=UNAVAILABLE_BACKOFF_MS[0],
                max_backoff=UNAVAILABLE_BACKOFF_MS[1]),
    ]
    broker: dramatiq.Broker
    if url.startswith(("amqp://", "amqps://")):
        broker = RabbitmqBroker(url=_amqp_url(url), middleware=middleware, confirm_delivery=True)
    else:
        import redis

        pool = redis.ConnectionPool.from_url(
            url, socket_timeout=5, socket_connect_timeout=2, health_check_interval=30
        )
        client = redis.Redis(connection_pool=pool)
        broker = NoticedRedisBroker(client=client, middleware=middleware)
    for queue in (JOBS_QUEUE, OUTBOX_QUEUE, NOTIFY_QUEUE, CALLS_QUEUE):
        broker.declare_queue(queue)
    return broker


def _amqp_url(url: str) -> str:
    """Fail fast when RabbitMQ is down instead of pika's long default retries."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.setdefault("connection_attempts", "1")
    query.setdefault("socket_timeout", "3")
    query.setdefault("blocked_connection_timeout", "5")
    query.setdefault("heartbeat", "30")
    return urlunsplit(parts._replace(query=urlencode(query)))


def _message(queue: str, actor: str, args: tuple[object, ...]) -> dramatiq.Message:  # type: ignore[type-arg]
    return dramatiq.Message(queue_name=queue, actor_name=actor, args=args, kwargs={}, options={})


def messages_for(due: int, per: int = JOBS_PER_MESSAGE) -> int:
    """Wake-ups enough for `due` rows, one per claim's worth (`per`)."""
    return -(-due // per)


def shares(job_ids: Sequence[int]) -> list[int]:
    """One id per claim's worth of job_ids: the last of each share of JOBS_PER_MESSAGE
    (the message names it, the worker logs it; a claim takes any due jobs)."""
    per = JOBS_PER_MESSAGE
    return [job_ids[min(start + per, len(job_ids)) - 1] for start in range(0, len(job_ids), per)]


def wake_jobs(broker: dramatiq.Broker, job_ids: Sequence[int], *, delay: float = 0) -> bool:
    """Best effort: wake workers for these jobs, one wake-up per claim's worth of them,
    `delay` seconds from now (a retry's backoff). False if the broker is unreachable."""
    return _enqueue_jobs(broker, shares(job_ids), delay)


def wake_due_jobs(broker: dramatiq.Broker, due: int) -> bool:
    """Best effort: wake workers for `due` jobs whose ids are not at hand (a resumed
    provider's backlog, a sweep), one wake-up per claim's worth."""
    return _enqueue_jobs(broker, [0] * messages_for(due), 0)


def _enqueue_jobs(broker: dramatiq.Broker, named: list[int], delay: float) -> bool:
    delay_ms = int(delay * 1000) or None
    try:
        for job_id in named:
            broker.enqueue(_message(JOBS_QUEUE, PROCESS_JOBS, (job_id,)), delay=delay_ms)
    except Exception as error:  # any broker/network failure: the sweeper enqueues it later
        log.warning("broker unreachable, job left for the sweeper: %s", _one_line(error))
        return False
    return True


def wake_outbox(broker: dramatiq.Broker, count: int = 1) -> bool:
    """Best effort: enqueue `count` outbox dispatch wake-ups."""
    try:
        for _ in range(count):
            broker.enqueue(_message(OUTBOX_QUEUE, DISPATCH_OUTBOX, ()))
    except Exception as error:
        log.warning("broker unreachable, outbox left for the sweeper: %s", _one_line(error))
        return False
    return True


def wake_calls(broker: dramatiq.Broker, count: int = 1, *, delay: float = 0) -> bool:
    """Best effort: enqueue `count` call dispatch wake-ups, `delay` seconds from now."""
    delay_ms = int(delay * 1000) or None
    try:
        for _ in range(count):
            broker.enqueue(_message(CALLS_QUEUE, DISPATCH_CALLS, ()), delay=delay_ms)
    except Exception as error:
        log.warning("broker unreachable, calls left for the sweeper: %s", _one_line(error))
        return False
    return True


def wake_notifications(broker: dramatiq.Broker, count: int = 1, *, delay: float = 0) -> bool:
    """Best effort: enqueue `count` notification dispatch wake-ups, `delay` seconds from
    now (a coalesced tail, due when its window closes)."""
    delay_ms = int(delay * 1000) or None
    try:
        for _ in range(count):
            broker.enqueue(_message(NOTIFY_QUEUE, DISPATCH_NOTIFICATIONS, ()), delay=delay_ms)
    except Exception as error:
        log.warning("broker unreachable, notifications left for the sweeper: %s",
                    _one_line(error))
        return False
    return True


def queued(broker: dramatiq.Broker, queue: str) -> int | None:
    """Messages waiting in a queue, or None if unknown (the broker is unreachable)."""
    try:
        if isinstance(broker, RedisBroker):
            return int(broker.client.llen(f"{broker.namespace}:{queue}"))
        if isinstance(broker, RabbitmqBroker):
            return int(broker.get_queue_message_counts(queue)[0])
    except Exception as error:
        log.debug("queue length unknown: %s", _one_line(error))
    return None


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"
