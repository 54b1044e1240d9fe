"""The calls handlers queue to other APIs (SPEC "Calls to other APIs"): their statements,
and what the handler API, the dispatcher (worker/calls.py) and `webhooks calls` do with
them. A call is queued in its job's transaction (`ctx.queue_call`), once per key; the
dispatcher claims due calls with a lease, makes each with its idempotency key after the
claim commits, and marks its outcome guarded by the attempt it claimed.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from webhooks.shared import db
from webhooks.shared.errors import PermanentJobError, WebhooksError
from webhooks.shared.models import CallStatus

log = logging.getLogger(__name__)

PENDING, SENT, FAILED, AMBIGUOUS = (CallStatus.PENDING.value, CallStatus.SENT.value,
                                    CallStatus.FAILED.value, CallStatus.AMBIGUOUS.value)
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
MAX_KEY_LENGTH = 255  # Stripe's limit on an idempotency key

CallInsert = text("""
    INSERT INTO calls (key, target, method, path, params, idempotency_key, provider,
                       event_id, source, account)
    VALUES (:key, :target, :method, :path, CAST(:params AS jsonb), :key, :provider,
            :event_id, :source, :account)
    ON CONFLICT (key) DO NOTHING
    RETURNING id
""")

CallResult = text(f"""
    SELECT response_status, response FROM calls WHERE key = :key AND status = '{SENT}'
""")

# Due calls, leased: hidden from other dispatchers until the lease ends (a dispatcher that
# died), each attempt counted; the key's lifetime starts at its first claim, before any
# request, so that it never starts later than the target's.
CallClaimDue = text(f"""
    UPDATE calls SET attempts = attempts + 1,
                     first_attempt_at = coalesce(first_attempt_at, now()),
                     run_at = now() + make_interval(secs => :lease_seconds)
    WHERE id IN (SELECT id FROM calls WHERE status = '{PENDING}' AND run_at <= now()
                 ORDER BY run_at, id LIMIT :limit FOR UPDATE SKIP LOCKED)
    RETURNING id, key, target, method, path, params::text AS params, idempotency_key,
              provider, source, account, attempts,
              extract(epoch FROM now() - first_attempt_at)::float8 AS key_age_seconds
""")

CallMarkSent = text(f"""
    UPDATE calls SET status = '{SENT}', response_status = :status,
                     response = CAST(:response AS jsonb), sent_at = now(), last_error = NULL
    WHERE id = :id AND attempts = :attempts AND status = '{PENDING}'
""")

CallMarkFailed = text(f"""
    UPDATE calls SET status = '{FAILED}', response_status = :status,
                     response = CAST(:response AS jsonb), last_error = :error
    WHERE id = :id AND attempts = :attempts AND status = '{PENDING}'
    RETURNING key, target, provider, source
""")

CallMarkRetry = text(f"""
    UPDATE calls SET run_at = now() + make_interval(secs => :delay), last_error = :error,
                     response_status = :status, response = CAST(:response AS jsonb)
    WHERE id = :id AND attempts = :attempts AND status = '{PENDING}'
""")

CallMarkAmbiguous = text(f"""
    UPDATE calls SET status = '{AMBIGUOUS}', last_error = :error
    WHERE id = :id AND attempts = :attempts AND status = '{PENDING}'
    RETURNING key, target, provider, source
""")

CallCountDue = text(f"""
    SELECT count(*) FROM calls WHERE status = '{PENDING}' AND run_at <= now()
""")

CallList = text("""
    SELECT key, target, method, path, status, attempts, response_status, last_error,
           created_at, sent_at, idempotency_key, event_id
    FROM calls WHERE (CAST(:status AS text) IS NULL OR status = :status)
    ORDER BY id DESC LIMIT :limit
""")

CallSettleSent = text(f"""
    UPDATE calls SET status = '{SENT}', sent_at = now(),
                     last_error = 'settled as sent by an operator'
    WHERE key = :key AND status = '{AMBIGUOUS}'
    RETURNING id
""")

# Sent again under a new key: the target's copy of the old key may be gone, so the old
# key cannot dedup; a new key starts a new lifetime.
CallSettleResend = text(f"""
    UPDATE calls SET status = '{PENDING}', idempotency_key = :new_key, attempts = 0,
                     first_attempt_at = NULL, run_at = now(), last_error = NULL,
                     response_status = NULL, response = NULL
    WHERE key = :key AND status IN ('{AMBIGUOUS}', '{FAILED}')
    RETURNING id
""")

CallQueued = text("""
    SELECT target, method, path, params::text FROM calls WHERE key = :key
""")


class UnknownTarget(PermanentJobError):
    """A call to a target no variable configures: the job fails at once (another attempt
    would find it unknown too), to be replayed once the variable is set."""


class InvalidCall(PermanentJobError):
    """A call no target could take (a method or a path that is not one)."""


class SettleRefused(WebhooksError):
    """A call that is neither ambiguous nor (for a resend) failed, or no such key:
    nothing was settled."""


@dataclass(frozen=True)
class ClaimedCall:
    id: int
    key: str
    target: str
    method: str
    path: str
    params: str
    idempotency_key: str
    provider: str | None
    source: str | None
    account: str | None
    attempts: int
    key_age_seconds: float


def queue(conn: Connection, *, key: str, target: str, method: str, path: str,
          params: dict[str, Any], provider: str, event_id: str, source: str,
          account: str | None, targets: Any) -> bool:
    """The call recorded in the job's transaction; False if its key exists."""
    if target not in targets:
        raise UnknownTarget(f"no call target {target!r} (stripe, or CALL_<N>_URL)")
    if method.upper() not in METHODS:
        raise InvalidCall(f"method {method!r} is not one of {', '.join(METHODS)}")
    if not path.startswith("/") or "://" in path:
        raise InvalidCall(f"path {path!r} must be a path of the target, starting with /")
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidCall(f"a call's key is 1 to {MAX_KEY_LENGTH} characters")
    encoded = json.dumps(params)
    row = db.fetch_in(conn, CallInsert, {
        "key": key, "target": target, "method": method.upper(), "path": path,
        "params": encoded, "provider": provider, "event_id": event_id,
        "source": source, "account": account})
    if row is None:
        _same_as_queued(conn, key, (target, method.upper(), path, json.loads(encoded)))
    return row is not None


def _same_as_queued(conn: Connection, key: str, call: tuple[Any, ...]) -> None:
    """A key queued again with another call: a WARNING (the first one is made, once)."""
    queued = db.fetch_in(conn, CallQueued, {"key": key})
    if queued is not None and (*queued[:3], json.loads(queued[3])) != call:
        log.warning("call key queued again with another request: the first one is made",
                    extra={"key": key, "target": call[0], "path": call[2]})


def result(conn: Connection, key: str) -> dict[str, Any] | None:
    """A sent call's answer: {"status": ..., "body": ...}; None if it is not sent."""
    row = db.fetch_in(conn, CallResult, {"key": key})
    if row is None:
        return None
    body = row[1] if not isinstance(row[1], str) else json.loads(row[1])
    return {"status": row[0], "body": body}


@dataclass(frozen=True)
class CallRow:
    key: str
    target: str
    method: str
    path: str
    status: str
    attempts: int
    response_status: int | None
    last_error: str | None
    created_at: datetime
    sent_at: datetime | None
    idempotency_key: str
    event_id: str | None


def list_calls(engine: Engine, status: str | None, limit: int) -> list[CallRow]:
    with engine.connect() as conn:
        return [CallRow(*row) for row in conn.execute(CallList,
                                                      {"status": status, "limit": limit})]


def settle(engine: Engine, key: str, *, sent: bool) -> str | None:
    """An ambiguous call settled by an operator: sent (nothing more is made), or made
    again under a new key (returned; a failed call too, once what the target refused is
    fixed: a key, a permission). SettleRefused otherwise."""
    new_key = f"{key}:resend:{secrets.token_hex(4)}"
    with db.transaction(engine) as conn:
        row = conn.execute(CallSettleSent if sent else CallSettleResend,
                           {"key": key, "new_key": new_key}).first()
    if row is None:
        which = "ambiguous" if sent else "ambiguous or failed"
        raise SettleRefused(f"no {which} call has the key {key!r}")
    return None if sent else new_key
