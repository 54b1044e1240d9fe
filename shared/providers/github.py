"""GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`.

No timestamp is signed; replays are caught by the event id, `X-GitHub-Delivery`, which
GitHub keeps when a delivery is redelivered. The legacy SHA-1 `X-Hub-Signature` is ignored.
"""

from __future__ import annotations

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

name = "github"


def verify(
    body: bytes, headers: Headers, secrets: tuple[str, ...], tolerance: int, now: float
) -> Delivery:
    signature = header(headers, "X-Hub-Signature-256").strip()
    expected: list[bytes | str] = [_signature(secret, body) for secret in secrets]
    if not matches_any(expected, [signature]):
        raise InvalidSignature("X-Hub-Signature-256 matches no configured secret")
    payload = parse_object(body)
    return Delivery(
        event_id=require_id(headers.get("X-GitHub-Delivery"), "X-GitHub-Delivery"),
        event_type=optional_type(headers.get("X-GitHub-Event")),
        payload=payload,
    )


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    # The id is derived from the body, so sending one file twice is a duplicate, as it is
    # for the providers whose event id is inside the body.
    delivery = str(uuid.UUID(bytes=hashlib.sha256(body).digest()[:16]))
    return {"X-Hub-Signature-256": _signature(secret, body), "X-GitHub-Delivery": delivery}


def _signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac_sha256(secret, body).hex()
