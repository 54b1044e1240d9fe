"""Dispatch notifications (shared/notifications.py) to their channels, once per delivery:
Slack (an incoming webhook), email (Postmark, as the receipts) and a generic webhook
signed with Standard Webhooks headers. The transitions are shared.models.DeliveryStatus's.

The outbox's pattern (worker/outbox.py), on its own queue and actor, so that a slow or
failing receiver never delays a receipt:

- the claim commits first: attempts + 1 and a lease of LEASE_SECONDS, and the claimed
  deliveries' notifications are sealed in the same transaction (NotificationSeal waits
  behind a recorder adding to a tail, and what it returns is final), so every channel and
  every retry sends the same message;
- each HTTP call runs with no transaction open, one delivery after another, and its
  outcome is marked right after its response, in a short transaction guarded by the
  claimed attempt: a dispatcher killed mid-round leaves at most the delivery in flight
  to be sent again when its lease runs out;
- a failed attempt is retried with worker/retries.py's backoff (the emails' policy);
  attempts exhausted, or a permanent refusal (a 4xx other than 408 and 429), fail the
  delivery and the notification, counted by webhooks_notifications_failed_total: the
  rule every dispatch shares (worker/dispatch.py `next_step`, its typed outcomes).

Duplicates: a receiver can lose its answer (timeout, a SIGKILL between its 2xx and our
mark), and then the delivery is sent again, the same message. The generic webhook's
`webhook-id` is the notification's id on every attempt, so a receiver dedups on it; email
carries `notification:<id>` as its Postmark idempotency key and, like a receipt, is
searched for before a retried attempt sends again. Slack has no id: a lost answer may
repeat a Slack message.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import dramatiq
import requests
from sqlalchemy.engine import Engine
from standardwebhooks.webhooks import Webhook

from webhooks.shared import db, metrics, queries, wakeups
from webhooks.shared.errors import EmailOutcomeUnknown
from webhooks.shared.models import Channel
from webhooks.shared.notifications import Message
from webhooks.shared.queries import ClaimedDelivery
from webhooks.shared.settings import Settings
from webhooks.worker import dispatch, postmark, retries

log = logging.getLogger(__name__)

LEASE_SECONDS = 45.0  # far beyond one call's timeouts: runs out only if we died
SEND_DEADLINE_SECONDS = 20.0  # no call starts later than this after the claim
LOOP_SECONDS = 60.0  # a wake-up dispatches rounds for at most this long
CLAIM_LIMIT = 20
TIMEOUT = (3.0, 10.0)  # connect, read
RETRYABLE_STATUSES = frozenset({408, 429})
USER_AGENT = "webhooks-notifications"


@dataclass
class NotificationRound:
    claimed: int = 0
    sent: int = 0
    retried: int = 0
    failed: int = 0
    released: int = 0


def on_wakeup(engine: Engine, settings: Settings, broker: dramatiq.Broker) -> None:
    """Dispatch due deliveries, round after round while a round claims any, for at most
    LOOP_SECONDS; then a fresh message carries on (worker/dispatch.py `rounds`)."""
    dispatch.rounds(lambda: dispatch_due(engine, settings).claimed, LOOP_SECONDS,
                    lambda: wakeups.wake_notifications(broker))


def dispatch_due(engine: Engine, settings: Settings, limit: int = CLAIM_LIMIT, *,
                 post: Callable[..., requests.Response] | None = None,
                 sender: postmark.Sender | None = None) -> NotificationRound:
    """Claim up to `limit` due deliveries, send each and mark it right after."""
    claimed, messages = _claim(engine, limit)
    result = NotificationRound(claimed=len(claimed))
    if not claimed:
        return result
    deadline = time.monotonic() + SEND_DEADLINE_SECONDS
    channels = _Channels(settings, post or _session().post,
                         sender or postmark.sender_for(settings, timeout=TIMEOUT[1]))
    policy = retries.for_emails(settings)
    for delivery in claimed:
        if time.monotonic() > deadline:
            _mark(engine, policy, delivery, None, result)
            continue
        message = messages[delivery.notification_id]
        outcome = channels.send(delivery, message)
        _mark(engine, policy, delivery, outcome, result)
    return result


def _claim(engine: Engine, limit: int) -> tuple[list[ClaimedDelivery], dict[str, Message]]:
    with db.transaction(engine) as conn:
        claimed = db.fetch_all_in(conn, queries.NotificationDeliveryClaim,
                                  {"limit": limit, "lease": LEASE_SECONDS}, ClaimedDelivery)
        if not claimed:
            return [], {}
        ids = sorted({row.notification_id for row in claimed})
        rows = conn.execute(queries.NotificationSeal, {"ids": ids}).all()
    messages = {row.id: Message(row.id, row.kind, row.provider, row.source, int(row.occurrences),
                                row.created_at, dict(row.details)) for row in rows}
    return sorted(claimed, key=lambda row: (row.notification_id, row.channel)), messages


def _mark(engine: Engine, policy: retries.Retries, delivery: ClaimedDelivery,
          outcome: dispatch.Outcome | None, result: NotificationRound) -> None:
    """One delivery's outcome (None: not attempted in time, given back), and the
    notification's status after it, in one short transaction. What follows the outcome
    is worker/dispatch.py's one rule (`next_step`)."""
    guard = {"id": delivery.notification_id, "channel": delivery.channel,
             "attempts": delivery.attempts}
    found = dispatch.next_step(outcome, delivery.attempts, policy)
    status = str(found.step)
    if found.step is dispatch.Step.SENT:
        statement, params = queries.NotificationDeliveryMarkSent, guard
    elif found.step is dispatch.Step.FAILED:
        statement = queries.NotificationDeliveryMarkFailed
        params = {**guard, "error": found.error}
    else:  # retried, or released (no delay)
        statement = queries.NotificationDeliveryMarkRetry
        params = {**guard, "delay": found.delay, "error": found.error}
    with db.transaction(engine) as conn:
        if conn.execute(statement, params).rowcount != 1:
            log.warning("notification delivery re-claimed by another dispatcher; outcome "
                        "dropped", extra=_log_fields(delivery))
            return
        conn.execute(queries.NotificationLock, {"id": delivery.notification_id})
        settled = conn.execute(queries.NotificationSettle,
                               {"id": delivery.notification_id}).scalar()
    _report(delivery, status, params, settled, result)


def _report(delivery: ClaimedDelivery, status: str, params: dict[str, Any],
            settled: str | None, result: NotificationRound) -> None:
    fields = {**_log_fields(delivery), "attempts": delivery.attempts}
    if settled:
        fields["notification_status"] = settled
    if status == "sent":
        result.sent += 1
        log.info("notification sent", extra=fields)
    elif status == "failed":
        result.failed += 1
        metrics.notifications_failed.labels(delivery.channel).inc()
        log.error("notification delivery failed", extra={**fields, "error": params["error"]})
    elif status == "retried":
        result.retried += 1
        log.warning("notification attempt failed, will retry",
                    extra={**fields, "delay": round(params["delay"], 2),
                           "error": params["error"]})
    else:
        result.released += 1


def _log_fields(delivery: ClaimedDelivery) -> dict[str, Any]:
    return {"notification_id": delivery.notification_id, "channel": delivery.channel}


class _Channels:
    """Each channel's one call."""

    def __init__(self, settings: Settings, post: Callable[..., requests.Response],
                 sender: postmark.Sender) -> None:
        self.settings, self.post, self.sender = settings, post, sender

    def send(self, delivery: ClaimedDelivery, message: Message) -> dispatch.Outcome:
        try:
            if delivery.channel == Channel.SLACK:
                return self.slack(message)
            if delivery.channel == Channel.WEBHOOK:
                return self.webhook(message)
            if delivery.channel == Channel.EMAIL:
                return self.email(message, delivery.attempts)
        except requests.RequestException as error:
            return dispatch.Unknown(f"{type(error).__name__}: {error}"[:500])
        return dispatch.Refused(f"channel {delivery.channel} is not configured")

    def slack(self, message: Message) -> dispatch.Outcome:
        url = self.settings.notify_slack_webhook_url
        if not url:
            return dispatch.Refused("NOTIFY_SLACK_WEBHOOK_URL is unset")
        return _answer(self.post(url, json={"text": message.slack_text}, timeout=TIMEOUT))

    def webhook(self, message: Message) -> dispatch.Outcome:
        url, secret = self.settings.notify_webhook_url, self.settings.notify_webhook_secret
        if not url or not secret:
            return dispatch.Refused("NOTIFY_WEBHOOK_URL is unset")
        body = json.dumps(message.webhook_body(), separators=(",", ":"))
        now = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": message.id,  # the same on every attempt: the receiver's dedup key
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(secret).sign(message.id, now, body),
        }
        return _answer(self.post(url, data=body.encode(), headers=headers, timeout=TIMEOUT))

    def email(self, message: Message, attempts: int) -> dispatch.Outcome:
        to = self.settings.notify_email_to
        if not to:
            return dispatch.Refused("NOTIFY_EMAIL_TO is unset")
        key = f"notification:{message.id}"
        if attempts > 1:  # an earlier attempt's outcome is unknown: Postmark may have it
            try:
                if (found := self.sender.find_sent(key)) is not None:
                    return dispatch.Sent(found)
            except EmailOutcomeUnknown as error:
                return dispatch.Unknown(str(error))
        outcome = postmark.as_outcome(self.sender.send([postmark.OutboundEmail(
            idempotency_key=key, to=to, subject=message.subject, text_body=message.text,
            html_body="")])[0], str)
        assert outcome is not None  # a send's outcome is never "not attempted"
        return outcome


def _answer(response: requests.Response) -> dispatch.Outcome:
    """2xx: sent; a 4xx other than 408 and 429: refused for good; anything else: retry."""
    status = response.status_code
    if 200 <= status < 300:
        return dispatch.Sent(status)
    error = f"HTTP {status}: {response.text[:200]}"
    if 400 <= status < 500 and status not in RETRYABLE_STATUSES:
        return dispatch.Refused(error)
    return dispatch.Unknown(error)


_sessions = threading.local()


def _session() -> requests.Session:
    """One session per thread (a session is not thread-safe), kept for its connections."""
    session: requests.Session | None = getattr(_sessions, "session", None)
    if session is None:
        session = _sessions.session = requests.Session()
    return session
