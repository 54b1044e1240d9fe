"""Slack Events API: `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:body">`,
with the timestamp in `X-Slack-Request-Timestamp`.

Slack signs slash commands and interactivity payloads the same way but form-encodes
them; only the Events API (JSON) is consumed here, so any other body is InvalidPayload.
A verified `url_verification` request is answered with its challenge, never recorded.
"""

from __future__ import annotations

from typing import Any

from webhooks.shared.errors import InvalidPayload, InvalidSignature
from webhooks.shared.providers.base import (
    Delivery,
    Headers,
    HmacScheme,
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

SIGNATURE = HmacScheme("X-Slack-Signature", hex_digest, prefix="v0=")


def verify(
    body: bytes, headers: Headers, source: Source, tolerance: int, now: float
) -> Delivery:
    signature = header(headers, SIGNATURE.header).strip()
    timestamp = header(headers, "X-Slack-Request-Timestamp").strip()
    # Plain ASCII digits only: int() would also take "+1_700" or non-ASCII digits.
    if not (timestamp.isascii() and timestamp.isdigit()):
        raise InvalidSignature("X-Slack-Request-Timestamp is not a number")
    check_timestamp(timestamp, tolerance, now)
    index = SIGNATURE.verify(source.secrets, _message(timestamp, body), [signature])
    payload = parse_object(body)
    if payload.get("type") == "url_verification":
        return _challenge(payload, index)
    event = payload.get("event")
    return Delivery(
        event_id=require_id(payload.get("event_id"), "event id"),
        event_type=optional_type(event.get("type") if isinstance(event, dict) else None),
        payload=payload,
        secret_index=index,
    )


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    timestamp = str(int(now))
    return {
        "X-Slack-Request-Timestamp": timestamp,
        SIGNATURE.header: SIGNATURE.sign(secret, _message(timestamp, body)),
    }


def _message(timestamp: str, body: bytes) -> bytes:
    return b"v0:" + timestamp.encode() + b":" + body


def _challenge(payload: dict[str, Any], index: int) -> Delivery:
    challenge = payload.get("challenge")
    if not isinstance(challenge, str) or not challenge:
        raise InvalidPayload("url_verification without a challenge")
    return Delivery(event_id="", event_type="url_verification", payload=payload,
                    reply={"challenge": challenge}, secret_index=index)


RECORD = Provider(
    name="slack", title="Slack Events API",
    secret_variable="SLACK_SIGNING_SECRET",  # noqa: S106 - the name of the variable
    secret_format=SecretFormat.HEX, verify=verify, sign=sign, signed_event_id=True,
    headers="`X-Slack-Signature`, `X-Slack-Request-Timestamp`", event_id="body `event_id`",
    event_type="body `event.type`",
)
