"""Standard Webhooks (Svix, Resend, Clerk, ...): `webhook-id`, `webhook-timestamp` and
`webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body"> [v1,<base64> ...]`,
with secrets written `whsec_<base64 key>`. Svix sends the same three headers named
`svix-id`, `svix-timestamp` and `svix-signature` (Clerk, Resend): both families are read.

Why we do not call `standardwebhooks.Webhook.verify()` (library 1.1.0; read its source):
- it checks the timestamp against the wall clock with a fixed 5-minute window, so a
  tolerance of ours above 5 minutes would be silently cut to 5, one below it would be
  widened, and the `now` we are given would be ignored;
- on malformed input it raises ValueError (`v1,a,b` or a bare word in the signature
  header), binascii.Error (bad base64) or UnicodeDecodeError (body), not its own error;
- it decodes the timestamp with float() and re-formats it before signing, so
  `1700000000.9` verifies as `1700000000`.
So we parse the headers and check the timestamp ourselves, against our tolerance, in
both directions, and use the library for what it owns: decoding the `whsec_` secret and
computing the signature (`Webhook.sign`). The comparison is constant-time.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from standardwebhooks.webhooks import EmptyWebhookSecretError, Webhook

from webhooks.shared.errors import InvalidSignature
from webhooks.shared.providers.base import (
    DedupScope,
    Delivery,
    Headers,
    Provider,
    SecretFormat,
    Source,
    check_timestamp,
    first_match,
    header,
    optional_type,
    parse_object,
    require_id,
)


def verify(
    body: bytes, headers: Headers, source: Source, tolerance: int, now: float
) -> Delivery:
    id_name, timestamp_name, signature_name = _family(headers)
    message_id = header(headers, id_name)
    timestamp = header(headers, timestamp_name).strip()
    given = _signatures(header(headers, signature_name), signature_name)
    # The canonical decimal only: the library signs the integer re-formatted, so any other
    # spelling of the same second ("+1700000000", "01700000000") must not verify.
    if not (timestamp.isascii() and timestamp.isdigit()) or timestamp.startswith("0"):
        raise InvalidSignature(f"{timestamp_name} is not a number")
    check_timestamp(timestamp, tolerance, now)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSignature("body is not UTF-8") from None
    index = first_match(_expected(message_id, int(timestamp), text, source.secrets), given)
    if index is None:
        raise InvalidSignature(f"no {signature_name} matches a configured secret")
    payload = parse_object(body)
    return Delivery(
        event_id=require_id(message_id, id_name),
        event_type=optional_type(payload.get("type")),
        payload=payload,
        secret_index=index,
    )


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    # The id is derived from the body, so sending one file twice is a duplicate, as it is
    # for the providers whose event id is inside the body.
    return sign_as(body, secret, now, "msg_" + hashlib.sha256(body).hexdigest()[:32], "")


def sign_as(body: bytes, secret: str, now: float, message_id: str,
            event_type: str) -> dict[str, str]:
    """The headers of message `message_id` (the type is the body's)."""
    signed_at = datetime.fromtimestamp(int(now), tz=UTC)
    signature = Webhook(secret).sign(message_id, signed_at, body.decode("utf-8"))
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now)),
        "webhook-signature": signature,
    }


# The same three headers under Svix's names, which Svix sends for Clerk, Resend and others.
_FAMILIES = (
    ("webhook-id", "webhook-timestamp", "webhook-signature"),
    ("svix-id", "svix-timestamp", "svix-signature"),
)


def _family(headers: Headers) -> tuple[str, str, str]:
    """The names of the header family to read: one family whole, never a mix of the two.

    When both are present, webhook-* wins (the Standard Webhooks names, as the spec says).
    """
    for names in _FAMILIES:
        if any(headers.get(name) is not None for name in names):
            return names
    return _FAMILIES[0]


def _signatures(value: str, header_name: str) -> list[str]:
    """The base64 of each `v1` signature; other versions (`v1a`, asymmetric) are skipped."""
    found = []
    for entry in value.split():
        version, _, signature = entry.partition(",")
        if version == "v1" and signature:
            found.append(signature)
    if not found:
        raise InvalidSignature(f"{header_name} has no v1 signature")
    return found


def _expected(
    message_id: str, timestamp: int, text: str, secrets: tuple[str, ...]
) -> list[bytes | str | None]:
    """The base64 signature under each secret, in the library's canonical encoding, or
    None for a secret that cannot sign (so that indexes stay the secrets' positions).

    Compared as base64 text: senders use the canonical padded encoding, and the library's
    own lenient decoding (it skips stray characters) would only widen what we accept.
    """
    try:
        signed_at = datetime.fromtimestamp(timestamp, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise InvalidSignature("webhook-timestamp out of range") from None
    expected: list[bytes | str | None] = []
    for secret in secrets:
        webhook = _webhook(secret)
        if webhook is None:
            expected.append(None)
            continue
        try:
            expected.append(webhook.sign(message_id, signed_at, text).partition(",")[2])
        except UnicodeEncodeError:
            raise InvalidSignature("webhook-id is not valid text") from None
    return expected


def _webhook(secret: str) -> Webhook | None:
    # A secret that is not base64 cannot have signed anything; skip it so that a second,
    # valid secret still works. (Settings should reject it at start.)
    try:
        return Webhook(secret)
    except (ValueError, EmptyWebhookSecretError):
        return None


RECORD = Provider(
    name="standard", title="Standard Webhooks (Svix, Resend, Clerk)",
    secret_variable="STANDARD_WEBHOOK_SECRET",  # noqa: S106 - the name of the variable
    secret_format=SecretFormat.WHSEC_BASE64, verify=verify, sign=sign, signed_event_id=True,
    headers="`webhook-id`, `webhook-timestamp`, `webhook-signature` "
            "(or Svix's `svix-id`, `svix-timestamp`, `svix-signature`)",
    event_id="header `webhook-id` (or `svix-id`)", event_type="body `type`",
    # Senders are unrelated applications (Clerk, Resend through Svix) whose message ids
    # may collide: an id is unique per source only.
    dedup=DedupScope.SOURCE, sign_as=sign_as,
)
