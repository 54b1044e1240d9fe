"""GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`.

No timestamp is signed, and neither is the event id, `X-GitHub-Delivery` (which GitHub
keeps when a delivery is redelivered), nor the type: a captured delivery re-sent with a new
id is caught by its body under its type instead (SIGNED_EVENT_ID, shared/recording.py). The
legacy SHA-1
`X-Hub-Signature` is ignored.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import TYPE_CHECKING

from webhooks.shared.providers.base import (
    Delivery,
    Headers,
    HmacScheme,
    SecretFormat,
    header,
    hex_digest,
    optional_type,
    parse_object,
    require_id,
)

if TYPE_CHECKING:
    from webhooks.shared.sources import Source

name = "github"
TITLE = "GitHub"
SECRET_VARIABLE = "GITHUB_WEBHOOK_SECRET"  # noqa: S105 - the name of the variable
SECRET_FORMAT = SecretFormat.HEX
RECONCILES = True
HEADERS = "`X-Hub-Signature-256`, `X-GitHub-Delivery`, `X-GitHub-Event`"
EVENT_ID = "header `X-GitHub-Delivery`"
EVENT_TYPE = "header `X-GitHub-Event`"
# The id and type headers are outside the signature: a body already recorded is a duplicate.
SIGNED_EVENT_ID = False
SIGNATURE = HmacScheme("X-Hub-Signature-256", hex_digest, prefix="sha256=")


def verify(
    body: bytes, headers: Headers, source: Source, tolerance: int, now: float
) -> Delivery:
    index = SIGNATURE.verify(source.secrets, body, [header(headers, SIGNATURE.header).strip()])
    payload = parse_object(body)
    return Delivery(
        event_id=require_id(headers.get("X-GitHub-Delivery"), "X-GitHub-Delivery"),
        event_type=optional_type(headers.get("X-GitHub-Event")),
        payload=payload,
        secret_index=index,
    )


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    # The id is derived from the body, so sending one file twice is a duplicate, as it is
    # for the providers whose event id is inside the body.
    delivery = str(uuid.UUID(bytes=hashlib.sha256(body).digest()[:16]))
    return {SIGNATURE.header: SIGNATURE.sign(secret, body), "X-GitHub-Delivery": delivery}
