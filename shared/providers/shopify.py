"""Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256 of the raw body>`, the event id in
`X-Shopify-Webhook-Id` and the topic in `X-Shopify-Topic`. Shopify's Events deliveries
name the same three headers without the `X-` prefix (`Shopify-Hmac-Sha256`, ...); a
request is read in one family, the `X-` one when its signature header is present.

No timestamp is signed, so there is nothing to check for staleness: replays are caught
by the event id, which Shopify keeps across retries, and a body re-sent under a new id by
the body under its topic (the record's `signed_event_id=False`, shared/recording.py). One
order's body comes as `orders/create` and as `orders/paid`: two events.
"""

from __future__ import annotations

import hashlib
import uuid

from webhooks.shared.providers.base import (
    Delivery,
    Headers,
    HmacScheme,
    Provider,
    SecretFormat,
    Source,
    base64_digest,
    header,
    optional_type,
    parse_object,
    require_id,
)

# Compared as base64 text: Shopify sends the canonical padded encoding, and decoding
# first would only widen what we accept (b64decode skips stray characters).
SIGNATURE = HmacScheme("X-Shopify-Hmac-Sha256", base64_digest)


def verify(
    body: bytes, headers: Headers, source: Source, tolerance: int, now: float
) -> Delivery:
    prefix = "X-" if headers.get(SIGNATURE.header) else ""
    signature = header(headers, f"{prefix}Shopify-Hmac-Sha256").strip()
    index = SIGNATURE.verify(source.secrets, body, [signature])
    payload = parse_object(body)
    webhook_id = f"{prefix}Shopify-Webhook-Id"
    return Delivery(
        event_id=require_id(headers.get(webhook_id), webhook_id),
        event_type=optional_type(headers.get(f"{prefix}Shopify-Topic")),
        payload=payload,
        secret_index=index,
    )


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    # The id is derived from the body, so sending one file twice is a duplicate, as it is
    # for the providers whose event id is inside the body.
    webhook_id = str(uuid.UUID(bytes=hashlib.sha256(body).digest()[:16]))
    return {SIGNATURE.header: SIGNATURE.sign(secret, body), "X-Shopify-Webhook-Id": webhook_id}


def sign_as(body: bytes, secret: str, now: float, event_id: str,
            event_type: str) -> dict[str, str]:
    return {**sign(body, secret, now), "X-Shopify-Webhook-Id": event_id,
            "X-Shopify-Topic": event_type}


RECORD = Provider(
    name="shopify", title="Shopify",
    secret_variable="SHOPIFY_WEBHOOK_SECRET",  # noqa: S106 - the name of the variable
    secret_format=SecretFormat.HEX, verify=verify, sign=sign,
    # The id and topic headers are outside the signature (and no timestamp is signed): a
    # body already recorded is a duplicate (shared/recording.py).
    signed_event_id=False,
    headers="`X-Shopify-Hmac-Sha256`, `X-Shopify-Webhook-Id`, `X-Shopify-Topic` "
            "(or the same without `X-`)",
    event_id="header `X-Shopify-Webhook-Id`", event_type="header `X-Shopify-Topic`",
    sign_as=sign_as,
)
