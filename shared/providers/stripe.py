"""Stripe: `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">[,v1=...]`.

Verified with the `stripe` library against each of the source's secrets (rotation). The
library only rejects timestamps that are too old; we also reject ones too far ahead.

A source of thin events (an event destination, `STRIPE_<NAME>_EVENTS=thin`) is verified
and parsed by the library's own thin-event parser,
`StripeClient.parse_event_notification`, with the source's API key: what it refuses
(a snapshot event, `"object": "event"`, posted to a thin source; a thin event without
its `type`, `created` or `related_object`) is refused here with a 400, before anything
is recorded, as the SDK would refuse it in the job. Whatever the kind, the payload
recorded is the JSON exactly as sent (shared.payloads), never the library's objects. A
thin event posted to a snapshot source is Stripe's, signed with that source's secret: it
is recorded, and its job fetches it with that source's API key (worker/thin_events.py),
or fails at once, saying so, when the source has none.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from webhooks.shared.errors import InvalidPayload, InvalidSignature
from webhooks.shared.providers.base import (
    Delivery,
    Headers,
    SecretFormat,
    check_timestamp,
    header,
    optional_type,
    parse_object,
    require_id,
)

if TYPE_CHECKING:
    import stripe as stripe_sdk

    from webhooks.shared.sources import Source

name = "stripe"
TITLE = "Stripe"
SECRET_VARIABLE = "STRIPE_WEBHOOK_SECRET"  # noqa: S105 - the name of the variable
SECRET_FORMAT = SecretFormat.WHSEC
SIGNED_EVENT_ID = True
RECONCILES = True
HEADERS = "`Stripe-Signature`"
EVENT_ID = "body `id`"
EVENT_TYPE = "body `type`"


class EventKind(StrEnum):
    """What a Stripe source receives: full events, or thin ones (an event destination)."""

    SNAPSHOT = "snapshot"
    THIN = "thin"


def verify(
    body: bytes, headers: Headers, source: Source, tolerance: int, now: float
) -> Delivery:
    signature = header(headers, "Stripe-Signature")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSignature("body is not UTF-8") from None
    check_timestamp(_timestamp(signature), tolerance, now)
    if source.events is EventKind.THIN:
        index = _thin_notification(text, signature, source, tolerance)
    else:
        index = _first_valid(text, signature, source.secrets, tolerance)
    payload = parse_object(body)
    account, livemode = origin(payload, connect=source.connect)
    return Delivery(
        event_id=require_id(payload.get("id"), "event id"),
        event_type=optional_type(payload.get("type")),
        payload=payload,
        secret_index=index,
        account=account,
        livemode=livemode,
    )


def origin(payload: dict[str, Any], *, connect: bool = True) -> tuple[str | None, bool | None]:
    """The event's connected account (a snapshot event's `account`, a thin event's
    `context`) and its `livemode`; None for what is absent or not of its type. `connect`
    False (a source that is not Connect, whose events are the platform's): a thin event's
    `context` is not taken, as its job does not fetch in it (worker/thin_events.py
    `context_of`)."""
    if not connect and payload.get("object") == "v2.core.event":
        payload = {key: value for key, value in payload.items() if key != "context"}
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


def _first_valid(text: str, signature: str, secrets: tuple[str, ...], tolerance: int) -> int:
    """The position of the first secret that verifies: a rotation is watched by which
    position is used. InvalidSignature when none does."""
    index = next((position for position, secret in enumerate(secrets)
                  if _valid(text, signature, secret, tolerance)), None)
    if index is None:
        raise InvalidSignature("no Stripe signature matches a configured secret")
    return index


def _thin_notification(text: str, signature: str, source: Source, tolerance: int) -> int:
    """The position of the first secret under which the library's thin-event parser
    accepts the delivery. A signature error under one secret tries the next; a signed body
    the parser refuses (not a thin event, a field missing) is InvalidPayload: a snapshot
    event at a thin source is refused, not recorded as a thin event that cannot be
    fetched."""
    import stripe as stripe_sdk  # only here: a slow import

    client = _thin_parser(source.api_key or "")
    for position, secret in enumerate(source.secrets):
        try:
            client.parse_event_notification(text, signature, secret, tolerance)
        except stripe_sdk.SignatureVerificationError:
            continue
        except ValueError as error:  # JSON, and "not a thin event notification"
            raise InvalidPayload(f"not a Stripe thin event: {_first_sentence(error)}"
                                 ) from None
        except (KeyError, TypeError, AttributeError, OverflowError, RecursionError) as error:
            raise InvalidPayload(f"not a Stripe thin event: {type(error).__name__} "
                                 f"{_first_sentence(error)}") from None
        return position
    raise InvalidSignature("no Stripe signature matches a configured secret")


def _first_sentence(error: Exception) -> str:
    return str(error).split(". ")[0][:200]


@functools.lru_cache(maxsize=8)
def _thin_parser(api_key: str) -> stripe_sdk.StripeClient:
    """One client per API key in a process, for parsing only: it makes no request here
    (the job fetches, worker/thin_events.py)."""
    import stripe as stripe_sdk

    return stripe_sdk.StripeClient(api_key, max_network_retries=0)


def _valid(text: str, signature: str, secret: str, tolerance: int) -> bool:
    import stripe as stripe_sdk  # only here: a slow import

    try:
        stripe_sdk.WebhookSignature.verify_header(text, signature, secret, tolerance)
    except stripe_sdk.SignatureVerificationError:
        return False
    except (ValueError, TypeError, OverflowError):
        return False
    return True
