"""Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256 of the raw body>`.

No timestamp is signed, so there is nothing to check for staleness: replays are caught
by the event id, `X-Shopify-Webhook-Id`, which Shopify keeps across retries.
"""

from __future__ import annotations

import base64
import hashlib
import uuid

from shared.errors import InvalidSignature
from shared.providers.base import (
    Delivery,
    Headers,
    header,
    hmac_sha256,
    matches_any,
    optional_type,
    parse_object,
    require_id,
)

name = "shopify"


def verify(
    body: bytes, headers: Headers, secrets: tuple[str, ...], tolerance: int, now: float
) -> Delivery:
    signature = header(headers, "X-Shopify-Hmac-Sha256").strip()
    expected: list[bytes | str] = [_digest(secret, body) for secret in secrets]
    # Compared as base64 text: Shopify sends the canonical padded encoding, and decoding
    # first would only widen what we accept (b64decode skips stray characters).
    if not matches_any(expected, [signature]):
        raise InvalidSignature("X-Shopify-Hmac-Sha256 matches no configured secret")
    payload = parse_object(body)
    return Delivery(
        event_id=require_id(headers.get("X-Shopify-Webhook-Id"), "X-Shopify-Webhook-Id"),
        event_type=optional_type(headers.get("X-Shopify-Topic")),
        payload=payload,
    )


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    # The id is derived from the body, so sending one file twice is a duplicate, as it is
    # for the providers whose event id is inside the body.
    webhook_id = str(uuid.UUID(bytes=hashlib.sha256(body).digest()[:16]))
    return {"X-Shopify-Hmac-Sha256": _digest(secret, body), "X-Shopify-Webhook-Id": webhook_id}


def _digest(secret: str, body: bytes) -> str:
    return base64.b64encode(hmac_sha256(secret, body)).decode("ascii")
