"""The interface every provider module implements, and the checks they share.

A provider turns a raw request (body bytes and headers) into a Delivery, or raises
InvalidSignature / InvalidPayload. It never touches the database: signature verification
happens before any database access.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from webhooks.shared import payloads
from webhooks.shared.errors import InvalidPayload, InvalidSignature

if TYPE_CHECKING:  # shared.sources reads the providers' records
    from webhooks.shared.sources import Source

MAX_ID_LENGTH = 255


class Headers(Protocol):
    """A case-insensitive header mapping (werkzeug's Headers, or requests' dict)."""

    def get(self, key: str) -> Any: ...


class SecretFormat(StrEnum):
    """How a provider writes an endpoint secret: what `webhooks dev` generates, and what
    Settings refuses at start."""

    HEX = "hex"  # any text is the HMAC key; generated as hex
    WHSEC = "whsec"  # `whsec_` + base64, the whole text the key (Stripe); any text accepted
    WHSEC_BASE64 = "whsec_base64"  # `whsec_` + the key in base64, refused otherwise

    def generate(self) -> str:
        if self is SecretFormat.HEX:
            return secrets.token_hex(16)
        return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()

    def problem(self, secret: str) -> str | None:
        """Why `secret` cannot be a secret of this format, or None."""
        if self is not SecretFormat.WHSEC_BASE64:
            return None
        try:
            decoded = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        except (ValueError, binascii.Error):
            decoded = b""
        return None if decoded else "must be whsec_ followed by base64"


class Provider(Protocol):
    """One provider's record: each module of shared/providers is one, and everything that
    lists providers (settings, `webhooks dev`, the command's choices, the metrics' labels,
    the README's table) reads them from webhooks.shared.providers.PROVIDERS."""

    @property
    def name(self) -> str:
        """The path segment (`/webhooks/<name>`), the `provider` column, the metric label."""

    @property
    def TITLE(self) -> str:
        """The provider as people call it (the README's table)."""

    @property
    def SECRET_VARIABLE(self) -> str:
        """The variable holding its endpoint secrets, comma-separated."""

    @property
    def SECRET_FORMAT(self) -> SecretFormat:
        """How its secrets are written."""

    @property
    def SIGNED_EVENT_ID(self) -> bool:
        """Whether the signature covers the event id; when not, a body already recorded is
        a duplicate whatever id it comes with (shared/recording.py)."""

    @property
    def RECONCILES(self) -> bool:
        """Whether its events can be listed through its API (shared/reconciliation)."""

    @property
    def HEADERS(self) -> str:
        """The headers a delivery needs, in Markdown (the README's table)."""

    @property
    def EVENT_ID(self) -> str:
        """Where the event id is read, in Markdown."""

    @property
    def EVENT_TYPE(self) -> str:
        """Where the event type is read, in Markdown."""

    def verify(self, body: bytes, headers: Headers, source: Source, tolerance: int,
               now: float) -> Delivery:
        """The delivery, or InvalidSignature / InvalidPayload, verified against the source's
        own secrets only (`source.secrets`, the first that matches): a delivery signed for
        another source of the provider fails. The one call of every route; what else of
        the source a scheme reads (a Stripe source's kind of events) is the provider's."""

    def sign(self, body: bytes, secret: str, now: float) -> dict[str, str]:
        """The headers that sign `body` with `secret` (`webhooks send`, the tests)."""


@dataclass(frozen=True)
class Delivery:
    event_id: str
    event_type: str
    payload: dict[str, Any]
    # A reply to answer at once without recording anything (Slack's url_verification).
    reply: dict[str, Any] | None = None
    # Which configured secret verified it: its 0-based index in the comma-separated
    # variable, so that a rotation can be watched until the old secret is no longer used.
    secret_index: int = 0
    # Stripe's: the connected account an event belongs to (a Connect endpoint's events, a
    # thin event's `context`; None for the platform's own) and the event's livemode. Read
    # from the payload the verification parsed (no second parse); None elsewhere.
    account: str | None = None
    livemode: bool | None = None


def parse_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or InvalidPayload."""
    try:
        # Decode explicitly: json.loads(bytes) would also accept UTF-16 and UTF-32.
        payload = payloads.parse(body.decode("utf-8"))
    except payloads.UnsafeNumber as error:
        raise InvalidPayload(f"body holds a number Postgres and Python disagree on: {error}"
                             ) from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidPayload("body is not JSON") from None
    if not isinstance(payload, dict):
        raise InvalidPayload("body is not a JSON object")
    return payload


def require_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_LENGTH:
        raise InvalidPayload(f"missing or invalid {what}")
    if "\x00" in value:
        raise InvalidPayload(f"invalid {what}")
    return value


def optional_type(value: Any) -> str:
    if isinstance(value, str) and value and len(value) <= MAX_ID_LENGTH and "\x00" not in value:
        return value
    return "unknown"


def check_timestamp(raw: Any, tolerance: int, now: float) -> int:
    """A signed UNIX timestamp within tolerance of now, in the past or the future."""
    try:
        timestamp = int(str(raw).strip())
    except (TypeError, ValueError):
        raise InvalidSignature("timestamp is not a number") from None
    if abs(now - timestamp) > tolerance:
        raise InvalidSignature("timestamp outside the tolerance")
    return timestamp


def hmac_sha256(secret: str | bytes, message: bytes) -> bytes:
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, message, hashlib.sha256).digest()


def hex_digest(digest: bytes) -> str:
    return digest.hex()


def base64_digest(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


@dataclass(frozen=True)
class HmacScheme:
    """A signature that is an HMAC-SHA256 of a signed message under the endpoint secret,
    written as `prefix + encode(digest)`: the shape GitHub, Shopify, Paddle and Slack
    share. What each signs (the body, or a timestamp and the body) is the provider's."""

    header: str  # where the signature arrives, for error messages
    encode: Callable[[bytes], str]
    prefix: str = ""

    def sign(self, secret: str, message: bytes) -> str:
        return self.prefix + self.encode(hmac_sha256(secret, message))

    def verify(self, secrets: tuple[str, ...], message: bytes, given: list[str]) -> int:
        """The index of the first of secrets under which one of `given` is the signature,
        or InvalidSignature (constant-time comparisons of each against each)."""
        index = first_match([self.sign(secret, message) for secret in secrets], given)
        if index is None:
            raise InvalidSignature(f"{self.header} matches no configured secret")
        return index


def first_match(expected: Sequence[bytes | str | None], given: list[str]) -> int | None:
    """The index of the first expected signature equal to one of given, or None; None
    entries (a secret that cannot sign) match nothing. Every pair is compared, in constant
    time, whatever matched: the time taken tells nothing about which one did."""
    found: int | None = None
    for index, want in enumerate(expected):
        if want is None:
            continue
        want_bytes = want.encode() if isinstance(want, str) else want
        for candidate in given:
            try:
                candidate_bytes = candidate.encode("ascii")
            except UnicodeEncodeError:
                continue
            if hmac.compare_digest(want_bytes, candidate_bytes) and found is None:
                found = index
    return found


def header(headers: Headers | Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if not value or not isinstance(value, str):
        raise InvalidSignature(f"missing {name} header")
    return value
