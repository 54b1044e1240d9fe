"""Slack Events API: `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:body">`,
with the timestamp in `X-Slack-Request-Timestamp`.

Slack signs slash commands and interactivity payloads the same way but form-encodes
them; only the Events API (JSON) is consumed here, so any other body is InvalidPayload.
A verified `url_verification` request is answered with its challenge, never recorded.
"""

from __future__ import annotations

from typing import Any

from shared.errors import InvalidPayload, InvalidSignature
from shared.providers.base import (
    Delivery,
    Headers,
    check_timestamp,
    header,
    hmac_sha256,
    matches_any,
    optional_type,
    parse_object,
    require_id,
)

name = "slack"


def verify(
    body: bytes, headers: Headers, secrets: tuple[str, ...], tolerance: int, now: float
) -> Delivery:
    signature = header(headers, "X-Slack-Signature").strip()
    timestamp = header(headers, "X-Slack-Request-Timestamp").strip()
    # Plain ASCII digits only: int() would also take "+1_700" or non-ASCII digits.
    if not (timestamp.isascii() and timestamp.isdigit()):
        raise InvalidSignature("X-Slack-Request-Timestamp is not a number")
    check_timestamp(timestamp, tolerance, now)
    expected: list[bytes | str] = [_signature(secret, timestamp, body) for secret in secrets]
    if not matches_any(expected, [signature]):
        raise InvalidSignature("X-Slack-Signature matches no configured secret")
    payload = parse_object(body)
    if payload.get("type") == "url_verification":
        return _challenge(payload)
    event = payload.get("event")
    return Delivery(
        event_id=require_id(payload.get("event_id"), "event id"),
        event_type=optional_type(event.get("type") if isinstance(event, dict) else None),
        payload=payload,
    )


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    timestamp = str(int(now))
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": _signature(secret, timestamp, body),
    }


def _signature(secret: str, timestamp: str, body: bytes) -> str:
    return "v0=" + hmac_sha256(secret, b"v0:" + timestamp.encode() + b":" + body).hex()


def _challenge(payload: dict[str, Any]) -> Delivery:
    challenge = payload.get("challenge")
    if not isinstance(challenge, str) or not challenge:
        raise InvalidPayload("url_verification without a challenge")
    return Delivery(
        event_id="", event_type="url_verification", payload=payload, reply={"challenge": challenge}
    )
