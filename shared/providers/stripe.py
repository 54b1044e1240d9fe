"""Stripe: `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">[,v1=...]`.

Verified with the `stripe` library against each configured secret (rotation). The
library only rejects timestamps that are too old; we also reject ones too far ahead.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from shared.errors import InvalidSignature
from shared.providers.base import (
    Delivery,
    Headers,
    SecretFormat,
    check_timestamp,
    header,
    optional_type,
    parse_object,
    require_id,
)

name = "stripe"
TITLE = "Stripe"
SECRET_VARIABLE = "STRIPE_WEBHOOK_SECRET"  # noqa: S105 - the name of the variable
SECRET_FORMAT = SecretFormat.WHSEC
SIGNED_EVENT_ID = True
RECONCILES = True
HEADERS = "`Stripe-Signature`"
EVENT_ID = "body `id`"
EVENT_TYPE = "body `type`"


def verify(
    body: bytes, headers: Headers, secrets: tuple[str, ...], tolerance: int, now: float
) -> Delivery:
    signature = header(headers, "Stripe-Signature")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSignature("body is not UTF-8") from None
    check_timestamp(_timestamp(signature), tolerance, now)
    # The first secret that verifies: rotation is watched by which position is used.
    index = next((position for position, secret in enumerate(secrets)
                  if _valid(text, signature, secret, tolerance)), None)
    if index is None:
        raise InvalidSignature("no Stripe signature matches a configured secret")
    payload = parse_object(body)
    account, livemode = origin(payload)
    return Delivery(
        event_id=require_id(payload.get("id"), "event id"),
        event_type=optional_type(payload.get("type")),
        payload=payload,
        secret_index=index,
        account=account,
        livemode=livemode,
    )


def origin(payload: dict[str, Any]) -> tuple[str | None, bool | None]:
    """The event's connected account (a snapshot event's `account`, a thin event's
    `context`) and its `livemode`; None for what is absent or not of its type."""
    account = payload.get("account", payload.get("context"))
    livemode = payload.get("livemode")
    return (account if isinstance(account, str) and account else None,
            livemode if isinstance(livemode, bool) else None)


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    timestamp = int(now)
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return {"Stripe-Signature": f"t={timestamp},v1={digest.hexdigest()}"}


def _timestamp(signature: str) -> str | None:
    """The one `t=`: the stripe library verifies the first part whose key is exactly `t`,
    so a header with another (` t=`, a second `t=`) could have this check look at a
    timestamp other than the signed one; it is refused."""
    found = [part.partition("=") for part in signature.split(",")
             if part.strip().partition("=")[0] == "t"]
    if not found:
        raise InvalidSignature("Stripe-Signature has no timestamp")
    if len(found) > 1 or found[0][0] != "t":
        raise InvalidSignature("Stripe-Signature must carry one timestamp, as `t=`")
    return found[0][2]


def _valid(text: str, signature: str, secret: str, tolerance: int) -> bool:
    import stripe as stripe_sdk  # only here: a slow import

    try:
        stripe_sdk.WebhookSignature.verify_header(text, signature, secret, tolerance)
    except stripe_sdk.SignatureVerificationError:
        return False
    except (ValueError, TypeError, OverflowError):
        return False
    return True
