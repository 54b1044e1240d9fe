"""Postmark through the `postmarker` client, reduced to what the outbox needs.

Every message carries its outbox idempotency key in Postmark `Metadata`, so a message
whose send outcome was lost can be found again with Postmark's outbound message search.
Every response becomes one of three outcomes:

- Sent(message_id): Postmark accepted the message (or the search found it).
- EmailRejected(reason): a 4xx that says the message itself can never be sent (invalid
  or inactive recipient, malformed message). Not retried.
- EmailOutcomeUnknown(reason): everything else: 5xx, timeout, dropped connection, a
  response we cannot read, and 4xx answers about the account rather than the message
  (bad token, rate limit, sender not confirmed). Retried; the next attempt searches
  before sending, so "unknown" also safely covers "certainly not sent".

Without POSTMARK_SERVER_TOKEN the ConsoleSender writes each email to the log instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import requests
from postmarker.core import PostmarkClient
from postmarker.exceptions import PostmarkerException

from webhooks.shared.errors import EmailOutcomeUnknown, EmailRejected, describe
from webhooks.shared.settings import Settings
from webhooks.worker import dispatch

log = logging.getLogger(__name__)

METADATA_KEY = "idempotency_key"
MESSAGE_STREAM = "outbound"
DEFAULT_TIMEOUT_SECONDS = 10.0
MAX_REASON_LENGTH = 500

# HTTP statuses and Postmark ErrorCodes of a 4xx that blame the account, the token or the
# service, not the message: the same message can be accepted later.
RETRYABLE_STATUSES = frozenset({401, 403, 408, 429})
RETRYABLE_ERROR_CODES = frozenset({
    10,   # bad or missing server token
    100,  # maintenance
    400,  # sender signature not found
    401,  # sender signature not confirmed
    405,  # account out of credits
    412,  # account pending approval
})

# What postmarker and requests raise for a failed call: ClientError (a Postmark error
# body), HTTPError (an error without one), Timeout/ConnectionError, ValueError (a body
# that is not JSON) and KeyError (a JSON error body without ErrorCode).
CALL_ERRORS = (PostmarkerException, requests.RequestException, ValueError, KeyError)


@dataclass(frozen=True)
class OutboundEmail:
    idempotency_key: str
    to: str
    subject: str
    text_body: str
    html_body: str


@dataclass(frozen=True)
class Sent:
    message_id: str


Outcome = Sent | EmailRejected | EmailOutcomeUnknown


def as_outcome(outcome: Outcome | None,
               text: Callable[[BaseException], str] = describe) -> dispatch.Outcome | None:
    """A Postmark outcome as every dispatch's (worker/dispatch.py): sent, with its message
    id; refused; or unknown, each error as `text` writes it. None stays None (no attempt)."""
    if outcome is None or isinstance(outcome, Sent):
        return None if outcome is None else dispatch.Sent(outcome.message_id)
    if isinstance(outcome, EmailRejected):
        return dispatch.Refused(text(outcome))
    return dispatch.Unknown(text(outcome))


class Sender(Protocol):
    def find_sent(self, key: str) -> str | None:
        """The MessageID of a message already sent with this key, or None.
        Raises EmailOutcomeUnknown when the search itself fails."""
        ...

    def send(self, emails: Sequence[OutboundEmail]) -> list[Outcome]:
        """One outcome per email, in order. Never raises for a Postmark or network error."""
        ...


class PostmarkSender:
    def __init__(self, server_token: str, api_url: str, email_from: str,
                 timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self._client = PostmarkClient(server_token=server_token,
                                      root_api_url=api_url.rstrip("/") + "/", timeout=timeout)
        self._from = email_from

    def find_sent(self, key: str) -> str | None:
        # postmarker's messages.outbound.all() knows only fixed filters, not Postmark's
        # `metadata_<name>` one; client.call() sends any extra keyword as a query parameter,
        # with the server token header, the timeout and postmarker's error handling.
        try:
            response = self._client.call("GET", "/messages/outbound", count=1, offset=0,
                                         **{f"metadata_{METADATA_KEY}": key})
        except CALL_ERRORS as error:
            raise EmailOutcomeUnknown(f"search failed: {translate(error)}") from error
        return _found(response, key)

    def send(self, emails: Sequence[OutboundEmail]) -> list[Outcome]:
        if len(emails) == 1:
            return [self._send_one(emails[0])]
        return self._send_batch(emails) if emails else []

    def _send_one(self, email: OutboundEmail) -> Outcome:
        if not (email.text_body or email.html_body):
            return EmailRejected("the email has neither a text nor an HTML body")
        try:
            response = self._client.emails.send(**self._payload(email))
        except CALL_ERRORS as error:
            return translate(error)
        return _result_outcome(response)

    def _send_batch(self, emails: Sequence[OutboundEmail]) -> list[Outcome]:
        sendable = [email for email in emails if email.text_body or email.html_body]
        if len(sendable) != len(emails):
            return [self._send_one(email) for email in emails]
        try:
            results = self._client.emails.send_batch(*(self._payload(e) for e in emails))
        except CALL_ERRORS as error:
            outcome = translate(error)
            if isinstance(outcome, EmailRejected):
                # Postmark refused the request as a whole, so none of it was sent: send one
                # by one to learn which message (if any) is at fault.
                return [self._send_one(email) for email in emails]
            return [outcome] * len(emails)
        if not isinstance(results, list) or len(results) != len(emails):
            unknown = EmailOutcomeUnknown(f"unexpected batch response: {str(results)[:200]}")
            return [unknown] * len(emails)
        return [_result_outcome(result) for result in results]

    def _payload(self, email: OutboundEmail) -> dict[str, Any]:
        return {
            "From": self._from,
            "To": email.to,
            "Subject": email.subject,
            "TextBody": email.text_body or None,
            "HtmlBody": email.html_body or None,
            "Metadata": {METADATA_KEY: email.idempotency_key},
            "MessageStream": MESSAGE_STREAM,
        }


class ConsoleSender:
    """POSTMARK_SERVER_TOKEN unset: the email goes to the log and counts as sent."""

    def find_sent(self, key: str) -> str | None:
        return None  # a second log line is harmless; there is nothing to search

    def send(self, emails: Sequence[OutboundEmail]) -> list[Outcome]:
        """One INFO line per request, naming the first email; each email, its body
        included, at DEBUG (LOG_LEVEL=DEBUG shows them all)."""
        outcomes: list[Outcome] = []
        for email in emails:
            context = {"idempotency_key": email.idempotency_key, "to": email.to}
            log.debug("email written to the log, not sent",
                      extra={**context, "subject": email.subject, "text_body": email.text_body})
            outcomes.append(Sent(f"console-{email.idempotency_key}"))
        if emails:
            log.info("emails written to the log, not sent (POSTMARK_SERVER_TOKEN is unset)",
                     extra={"emails": len(emails), "to": emails[0].to,
                            "subject": emails[0].subject})
        return outcomes


_senders = threading.local()


def sender_for(settings: Settings, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> Sender:
    """The sender for settings, one per thread: a requests session is not thread-safe,
    and keeping it alive across dispatches reuses its connections."""
    if not settings.postmark_server_token:
        return ConsoleSender()
    cache: dict[tuple[str, str, str, float], PostmarkSender]
    cache = _senders.__dict__.setdefault("cache", {})
    key = (settings.postmark_server_token, settings.postmark_api_url, settings.email_from,
           timeout)
    if key not in cache:
        cache[key] = PostmarkSender(*key)
    return cache[key]


def classify(
    status: int, error_code: int | None, reason: str
) -> EmailRejected | EmailOutcomeUnknown:
    """A Postmark error answer: rejected for good, or worth another (searched) attempt."""
    reason = reason[:MAX_REASON_LENGTH]
    if not 400 <= status < 500 or status in RETRYABLE_STATUSES:
        return EmailOutcomeUnknown(reason)
    if error_code in RETRYABLE_ERROR_CODES:
        return EmailOutcomeUnknown(reason)
    return EmailRejected(reason)


def translate(error: BaseException) -> EmailRejected | EmailOutcomeUnknown:
    """An exception from a postmarker call, as an outcome."""
    if isinstance(error, requests.Timeout):
        return EmailOutcomeUnknown(f"timeout: {error}"[:MAX_REASON_LENGTH])
    status = _http_status(error)
    if status is None:
        return EmailOutcomeUnknown(f"{type(error).__name__}: {error}"[:MAX_REASON_LENGTH])
    code = getattr(error, "error_code", None)
    reason = str(error) if isinstance(error, PostmarkerException) else f"HTTP {status}"
    return classify(status, code, reason)


def _http_status(error: BaseException) -> int | None:
    """The HTTP status behind an error: postmarker raises ClientError from the HTTPError
    (and a KeyError while handling one), so look along the chain."""
    seen: BaseException | None = error
    for _ in range(4):
        if seen is None:
            break
        response = getattr(seen, "response", None)
        if response is not None:
            return int(response.status_code)
        seen = seen.__cause__ or seen.__context__
    return None


def _result_outcome(result: Any) -> Outcome:
    """One message's result: the /email response or one entry of a /email/batch one."""
    if not isinstance(result, dict):
        return EmailOutcomeUnknown(f"unexpected response: {str(result)[:200]}")
    code = result.get("ErrorCode", 0)
    if code == 0 and result.get("MessageID"):
        return Sent(str(result["MessageID"]))
    if code == 0:
        return EmailOutcomeUnknown("accepted without a MessageID")
    return classify(422, code, f"[{code}] {result.get('Message', '')}")


def _found(response: Any, key: str) -> str | None:
    messages = response.get("Messages") if isinstance(response, dict) else None
    if not messages:
        return None
    metadata = messages[0].get("Metadata") or {}
    if metadata and metadata.get(METADATA_KEY) != key:
        # The filter was not applied: we know nothing, and sending could duplicate.
        raise EmailOutcomeUnknown("message search ignored the metadata filter")
    return str(messages[0]["MessageID"])
