"""Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex HMAC-SHA256 of "ts:body">[;h1=...]`.

While a secret is being rotated Paddle sends one `h1` per active secret, and we may have
several configured: any `h1` made with any configured secret is valid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from webhooks.shared import variables as v
from webhooks.shared.errors import InvalidSignature
from webhooks.shared.providers.base import (
    Delivery,
    Headers,
    HmacScheme,
    Option,
    Provider,
    SecretFormat,
    Source,
    check_timestamp,
    header,
    hex_digest,
    optional_type,
    parse_object,
    require_id,
)

if TYPE_CHECKING:
    from webhooks.shared.providers.events_api import EventsAPI

SIGNATURE = HmacScheme("Paddle-Signature", hex_digest)


def verify(
    body: bytes, headers: Headers, source: Source, tolerance: int, now: float
) -> Delivery:
    timestamp, signatures = _parse(header(headers, SIGNATURE.header))
    check_timestamp(timestamp, tolerance, now)
    index = SIGNATURE.verify(source.secrets, timestamp.encode() + b":" + body, signatures)
    payload = parse_object(body)
    return Delivery(
        event_id=require_id(payload.get("event_id"), "event id"),
        event_type=optional_type(payload.get("event_type")),
        payload=payload,
        secret_index=index,
    )


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    timestamp = str(int(now))
    signature = SIGNATURE.sign(secret, timestamp.encode() + b":" + body)
    return {SIGNATURE.header: f"ts={timestamp};h1={signature}"}


def _parse(signature: str) -> tuple[str, list[str]]:
    timestamps: list[str] = []
    signatures: list[str] = []
    for part in signature.split(";"):
        key, _, value = part.strip().partition("=")
        if key == "ts":
            timestamps.append(value)
        elif key == "h1":
            signatures.append(value)
    # Exactly one timestamp: with two, which one was signed would be ambiguous.
    if len(timestamps) != 1 or not signatures:
        raise InvalidSignature("Paddle-Signature needs one ts and at least one h1")
    # Plain ASCII digits only: int() would also take "+1_700" or non-ASCII digits.
    if not (timestamps[0].isascii() and timestamps[0].isdigit()):
        raise InvalidSignature("Paddle-Signature ts is not a number")
    return timestamps[0], signatures


# A Paddle source's key for its events API (PADDLE_<NAME>_API_KEY; the default: PADDLE_API_KEY).
API_KEY = Option("api_key", "API_KEY", v.text, None, "a named Paddle source's API key "
                 "(`GET /events`)", "unset: not reconciled",
                 default_doc="Paddle Billing (`GET /events`)", topic=v.Topic.RECONCILIATION)


def events_api(source: Source, api_base: str) -> EventsAPI:
    """`GET /events` with the source's key (shared/providers/paddle_events.py)."""
    from webhooks.shared.providers import paddle_events

    return paddle_events.PaddleEvents(source.credentials or "", api_base)


RECORD = Provider(
    name="paddle", title="Paddle Billing",
    secret_variable="PADDLE_WEBHOOK_SECRET",  # noqa: S106 - the name of the variable
    secret_format=SecretFormat.HEX, verify=verify, sign=sign, signed_event_id=True,
    headers="`Paddle-Signature`", event_id="body `event_id`", event_type="body `event_type`",
    credentials=API_KEY, api_base="https://api.paddle.com", events_api=events_api,
    events_api_needs=(API_KEY,),
)
