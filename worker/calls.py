"""Make the calls handlers queued (shared/calls.py), once per idempotency key.

No database transaction is open during a request: the claim commits first (leasing the
rows for LEASE_SECONDS and counting the attempt), and each outcome is written in a short
transaction of its own, guarded by the attempt this dispatcher claimed, so a dispatcher
whose lease ran out cannot mark a row another has claimed since.

Every attempt of a call sends the same idempotency key (the handler's `key`, or the new
one `webhooks calls settle --resend` gave it): the target makes the effect once and
replays its first answer to every retry within the key's lifetime. So a lost answer, a
timeout, a 5xx, a 429 or a 409 (the key's first request still in flight) is retried with
backoff, however it happened (a worker killed mid-request, a failover that lost the
"sent" mark: the row is due again and sends the same key). A 5xx the target saved for the
key (Stripe saves a 500 once a request began) is replayed to each retry: it stays unknown.
Past the key's lifetime (CALL_<N>_KEY_HOURS, from the first claim) an unknown outcome is
never sent again: `ambiguous`, with a `call.ambiguous` notification, for an operator to
settle. Any other 4xx is the target's refusal: `failed`, the answer recorded, with a
`call.failed` notification. A 2xx is `sent`, its answer recorded for `ctx.call_result`.

The outcomes and what follows them are the ones every dispatch shares (worker/dispatch.py:
`next_step` with the key's lifetime, `rounds`).

Targets: `stripe`, through the `stripe` library's `raw_request` (its retries off: these
are the retries), with the API key of the event's source and `Stripe-Account` for a
connected account's event; a `CALL_<N>_URL`, JSON over HTTP(S) with `Idempotency-Key`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import dramatiq
import requests
from sqlalchemy.engine import Engine

from webhooks.shared import calls, db, notifications, sources, wakeups
from webhooks.shared.call_targets import STRIPE, Target
from webhooks.shared.calls import ClaimedCall
from webhooks.shared.settings import Settings
from webhooks.worker import dispatch, retries

log = logging.getLogger(__name__)

LEASE_SECONDS = 60.0  # far beyond a request's timeout: it runs out only for a dead dispatcher
TIMEOUT_SECONDS = 20.0  # one request, connect and read
SEND_DEADLINE_SECONDS = 30.0  # no request starts later than this after the claim
LOOP_SECONDS = 60.0
BATCH = wakeups.CALLS_PER_MESSAGE
RETRYABLE_STATUSES = (409, 429)


@dataclass(frozen=True)
class Answer:
    """What the target answered: its status (None: no answer) and its body, and how long
    it asked us to wait (a 429's Retry-After)."""

    status: int | None
    body: Any = None
    error: str | None = None
    retry_after: float = 0.0

    def outcome(self) -> dispatch.Outcome:
        """2xx: sent; a 4xx other than 409 and 429: refused; anything else: unknown."""
        if self.status is not None and 200 <= self.status < 300:
            return dispatch.Sent(self.body)
        error = self.error or f"HTTP {self.status}: {json.dumps(self.body)[:300]}"
        if self.status is not None and 400 <= self.status < 500 \
                and self.status not in RETRYABLE_STATUSES:
            return dispatch.Refused(error, self.body)
        return dispatch.Unknown(error, self.retry_after)


@dataclass
class CallRound:
    claimed: int = 0
    sent: int = 0
    failed: int = 0
    retried: int = 0
    ambiguous: int = 0


def on_wakeup(engine: Engine, settings: Settings, broker: dramatiq.Broker) -> None:
    """Make due calls, round after round while a round claims any, for at most LOOP_SECONDS;
    then a fresh message carries on (worker/dispatch.py `rounds`). A retry's wake-up is
    sent for its time."""
    dispatch.rounds(lambda: dispatch_due(engine, settings, broker).claimed, LOOP_SECONDS,
                    lambda: wakeups.wake_calls(broker))


def dispatch_due(engine: Engine, settings: Settings,
                 broker: dramatiq.Broker | None = None) -> CallRound:
    """One round: claim up to BATCH due calls and make each."""
    result = CallRound()
    with db.transaction(engine) as conn:
        claimed = db.fetch_all_in(conn, calls.CallClaimDue,
                                  {"lease_seconds": LEASE_SECONDS, "limit": BATCH}, ClaimedCall)
    result.claimed = len(claimed)
    started = time.monotonic()
    for call in claimed:
        if time.monotonic() - started > SEND_DEADLINE_SECONDS:
            break  # the rest wait for their lease: due again, same key
        _one(engine, settings, call, result, broker)
    return result


def _one(engine: Engine, settings: Settings, call: ClaimedCall, result: CallRound,
         broker: dramatiq.Broker | None) -> None:
    target = settings.call_targets.get(call.target)
    lifetime = (target or Target(call.target)).key_seconds
    if call.key_age_seconds >= lifetime:  # the target may have forgotten the key
        _ambiguous(engine, settings, call, "the key's lifetime passed with its outcome "
                   "unknown", result)
        return
    answer = _send(settings, target, call)
    params = {"id": call.id, "attempts": call.attempts, "status": answer.status,
              "response": json.dumps(answer.body) if answer.body is not None else None}
    found = dispatch.next_step(answer.outcome(), call.attempts, retries.for_calls(settings),
                               key_age=call.key_age_seconds, lifetime=lifetime)
    error = found.error or ""
    if found.step is dispatch.Step.SENT:
        with db.transaction(engine) as conn:
            conn.execute(calls.CallMarkSent, params)
        result.sent += 1
        log.info("call sent", extra=_fields(call, answer))
    elif found.step is dispatch.Step.FAILED:
        _finished(engine, settings, calls.CallMarkFailed, {**params, "error": error},
                  notifications.Kind.CALL_FAILED, error)
        result.failed += 1
        log.error("call failed: the target refused it", extra=_fields(call, answer))
    elif found.step is dispatch.Step.AMBIGUOUS:
        _ambiguous(engine, settings, call, f"unknown outcome, last: {error}", result)
    else:
        with db.transaction(engine) as conn:
            conn.execute(calls.CallMarkRetry, {**params, "delay": found.delay, "error": error})
        result.retried += 1
        log.warning("call outcome unknown, retried with its key",
                    extra={**_fields(call, answer), "delay": round(found.delay, 2)})
        if broker is not None:
            wakeups.wake_calls(broker, delay=found.delay)


def _ambiguous(engine: Engine, settings: Settings, call: ClaimedCall, error: str,
               result: CallRound) -> None:
    _finished(engine, settings, calls.CallMarkAmbiguous,
              {"id": call.id, "attempts": call.attempts, "error": error},
              notifications.Kind.CALL_AMBIGUOUS, error)
    result.ambiguous += 1
    log.error("call ambiguous: never sent again until settled",
              extra={"key": call.key, "target": call.target, "error": error})


def _finished(engine: Engine, settings: Settings, statement: Any, params: dict[str, Any],
              kind: notifications.Kind, error: str) -> None:
    """A call failed or ambiguous, and its notification, in one transaction."""
    with db.transaction(engine) as conn:
        row = conn.execute(statement, params).first()
        if row is not None:
            notifications.record(conn, settings, [notifications.Occurrence(
                kind, row.provider or row.target, row.source or row.target,
                samples=[row.key], error=error[:300], extra={"target": row.target})])


def _fields(call: ClaimedCall, answer: Answer) -> dict[str, Any]:
    return {"key": call.key, "target": call.target, "method": call.method,
            "path": call.path, "attempt": call.attempts, "status": answer.status}


def _send(settings: Settings, target: Target | None, call: ClaimedCall) -> Answer:
    """The target's answer; whatever else goes wrong making the request is no answer (the
    call may have been made: retried with its key)."""
    try:
        return _request(settings, target, call)
    except Exception as error:  # an unknown outcome, never a lost round
        return Answer(None, error=f"{type(error).__name__}: {error}"[:300])


def _request(settings: Settings, target: Target | None, call: ClaimedCall) -> Answer:
    params = json.loads(call.params)
    if call.target == STRIPE:
        return _stripe(settings, call, params)
    if target is None or target.url is None:
        return Answer(None, error=f"no call target {call.target!r} is configured now")
    return _http(target, call, params)


def _stripe(settings: Settings, call: ClaimedCall, params: dict[str, Any]) -> Answer:
    """Through the stripe library, with the event's source's API key and its account."""
    import stripe as stripe_sdk

    source = sources.registry(settings).get(call.provider or STRIPE, call.source)
    if source is None or not source.credentials:
        return Answer(400, {"error": "no API key for the event's source"},
                      error=f"source {call.source!r} has no API key for Stripe calls")
    client = _stripe_client(source.credentials, settings.api_base(STRIPE) or "")
    try:
        response = client.raw_request(call.method.lower(), call.path,
                                      idempotency_key=call.idempotency_key,
                                      stripe_account=call.account, **params)
    except stripe_sdk.StripeError as error:
        body = error.json_body if isinstance(error.json_body, dict) else None
        return Answer(error.http_status, body, error=f"{type(error).__name__}: {error}"[:300],
                      retry_after=_retry_after(error.headers))
    return Answer(response.code, json.loads(response.body))


def _stripe_client(api_key: str, api_base: str) -> Any:
    """The process's client for the key and base, its requests bounded by TIMEOUT_SECONDS
    (well inside the lease), within the process's one Stripe budget."""
    from webhooks.shared.providers import stripe_budget  # the stripe library: a slow import

    return stripe_budget.client(api_key, api_base, TIMEOUT_SECONDS)


def _retry_after(headers: Any) -> float:
    """A Retry-After in seconds (0: none, or not a number of seconds)."""
    try:
        return max(float((headers or {}).get("Retry-After") or 0), 0.0)
    except (TypeError, ValueError):
        return 0.0


def _http(target: Target, call: ClaimedCall, params: dict[str, Any]) -> Answer:
    headers = {"Idempotency-Key": call.idempotency_key, "Content-Type": "application/json"}
    if target.authorization:
        headers["Authorization"] = target.authorization
    url = (target.url or "").rstrip("/") + call.path
    try:
        response = requests.request(call.method, url, data=json.dumps(params),
                                    headers=headers, timeout=TIMEOUT_SECONDS)
    except requests.RequestException as error:
        return Answer(None, error=f"{type(error).__name__}: {error}"[:300])
    try:
        body = response.json()
    except ValueError:
        body = {"text": response.text[:2000]}
    return Answer(response.status_code, body, retry_after=_retry_after(response.headers))
