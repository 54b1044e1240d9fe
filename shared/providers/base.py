"""The record every provider module declares (Provider), the source it verifies for
(Source), and the checks the signature schemes share.

A provider turns a raw request (body bytes and headers) into a Delivery, or raises
InvalidSignature / InvalidPayload. It never touches the database: signature verification
happens before any database access. This package imports nothing of the core but its
leaves, variables, errors, payloads and terminal (import-linter contracts in
pyproject.toml keep it so): the core reads the records, never the other way round.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from webhooks.shared import payloads
from webhooks.shared.errors import InvalidPayload, InvalidSignature, WebhooksError
from webhooks.shared.variables import IPNetwork, Parser, Topic

if TYPE_CHECKING:
    from webhooks.shared.providers.events_api import EventsAPI

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


class DedupScope(StrEnum):
    """Where a provider's event ids are unique, so what one event row is (SPEC, "Sources")."""

    PROVIDER = "provider"  # one logical event is one row whichever source carries it
    SOURCE = "source"  # senders are unrelated applications whose ids may collide


@dataclass(frozen=True)
class Option:
    """A setting a provider's sources take, one variable each: a named source's
    `<PROVIDER>_<NAME>_<SUFFIX>`, and the default source's `<PROVIDER>_<SUFFIX>` where
    `default_doc` says what it is there (shared/sources.py names and reads them)."""

    key: str  # its key in Source.options
    suffix: str  # STRIPE_<NAME>_CONNECT's `CONNECT`
    parse: Parser
    default: Any
    doc: str  # the named sources' row in the README
    shown: str  # the default as the README says it
    default_doc: str | None = None  # the default source's variable's doc; None: no variable
    topic: Topic = Topic.DEPLOY  # the README table of the default source's variable
    default_shown: str | None = None  # its default as that table says it

    def of(self, source: Source) -> Any:
        """The source's value of this option (its default when the source has none)."""
        return source.options.get(self.key, self.default)


@dataclass(frozen=True)
class Source:
    """One endpoint of a provider: a URL with its own secrets, allowlist, credentials (its
    API key or token) and the options its provider declares (Provider.options)."""

    provider: str
    name: str  # the provider's name for its default source
    secrets: tuple[str, ...] = ()
    allowed_networks: tuple[IPNetwork, ...] = ()  # empty: any address
    credentials: str | None = None  # the events API's key or token
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def default(self) -> bool:
        return self.name == self.provider

    @property
    def label(self) -> str:
        """`stripe` for the default source, `stripe/connect` for a named one: the path
        after /webhooks/, and how commands and logs name it."""
        return label(self.provider, self.name)


def label(provider: str, name: str) -> str:
    """A source's label from its provider and name (a row's provider and source)."""
    return provider if name in ("", provider) else f"{provider}/{name}"


@dataclass(frozen=True)
class PendingJob:
    """What the step before a job's handler sees (Provider.before_handler): the claimed job
    of one of the provider's events, its source (None: no longer configured) and whether a
    handler of the running apps takes its type."""

    event_id: str
    event_type: str
    payload: Any
    source_name: str
    source: Source | None
    livemode: bool | None
    account: str | None
    handled: bool
    api_base: str | None  # the provider's events API (`<PROVIDER>_API_BASE`)


@dataclass(frozen=True)
class NoEffect:
    """A job done with no effect by its provider's policy: `outcome` is its job's outcome,
    `why` and `fields` its DEBUG log line."""

    outcome: str
    why: str
    fields: Mapping[str, Any] = field(default_factory=dict)


class NotReady(WebhooksError):
    """The step before a handler could not run (a fetch the provider did not answer): the
    attempt fails, with this as its error, and the job's backoff is the retry."""


Verify = Callable[[bytes, "Headers", Source, int, float], "Delivery"]
Sign = Callable[[bytes, str, float], dict[str, str]]
# The headers that sign a body as a given event (its id, its type): for a provider whose id
# or type travel outside the body (`webhooks check-handlers` replays recorded events).
SignAs = Callable[[bytes, str, float, str, str], dict[str, str]]
# The payload the handler applies, or the job done with no effect; NotReady: try again.
BeforeHandler = Callable[[PendingJob], "Any | NoEffect"]


@dataclass(frozen=True)
class Provider:
    """One provider, declared once by its module (`RECORD`): everything that lists providers
    (settings, the sources' variables, `webhooks dev`, the command's choices, the metrics'
    labels, the README's tables) and everything that differs by provider (verification,
    dedup, reconciliation, the step before a handler) reads it from
    webhooks.shared.providers.PROVIDERS; the core never branches on a provider's name."""

    name: str  # the path segment (`/webhooks/<name>`), the `provider` column, metric label
    title: str  # the provider as people call it (the README's table)
    secret_variable: str  # the variable of its endpoint secrets, comma-separated
    secret_format: SecretFormat
    # The signature scheme: the delivery, or InvalidSignature / InvalidPayload, verified
    # against the source's own secrets only (`source.secrets`, the first that matches): a
    # delivery signed for another source of the provider fails. What else of the source a
    # scheme reads (a Stripe source's kind of events) is the provider's.
    verify: Verify
    sign: Sign  # the headers that sign a body with a secret (`webhooks send`, the tests)
    # Whether the signature covers the event id; when not, a body already recorded is a
    # duplicate whatever id it comes with (shared/recording.py).
    signed_event_id: bool
    headers: str  # the headers a delivery needs, in Markdown (the README's table)
    event_id: str  # where the event id is read, in Markdown
    event_type: str  # where the event type is read, in Markdown
    dedup: DedupScope = DedupScope.PROVIDER
    # Its sources' credentials for its events API (`<PROVIDER>[_<NAME>]_<SUFFIX>`), and the
    # other options its sources take.
    credentials: Option | None = None
    options: tuple[Option, ...] = ()
    # Its events API (reconciliation): the default base URL (`<PROVIDER>_API_BASE`), the
    # client for a source and base, and the options it cannot do without.
    api_base: str | None = None
    events_api: Callable[[Source, str], EventsAPI] | None = None
    events_api_needs: tuple[Option, ...] = ()
    # The origin an event's payload names (the connected account, livemode), for an event
    # recorded by reconciliation; a delivery's is its Delivery's.
    origin: Callable[[dict[str, Any]], tuple[str | None, bool | None]] | None = None
    # What a source's options make necessary: (the option unset, the error's hint) or None.
    missing: Callable[[Source], tuple[Option, str] | None] | None = None
    # The step a job of this provider takes before its handler, in the job's transaction.
    before_handler: BeforeHandler | None = None
    # Where the event id or type travel outside the body: the headers that sign a body as
    # a given event. None: `sign`, the body says both.
    sign_as: SignAs | None = None

    def signed_as(self, body: bytes, secret: str, now: float, event_id: str,
                  event_type: str) -> dict[str, str]:
        """The headers that deliver `body` as event (event_id, event_type)."""
        if self.sign_as is not None:
            return self.sign_as(body, secret, now, event_id, event_type)
        return self.sign(body, secret, now)

    @property
    def reconciles(self) -> bool:
        """Whether its events can be listed through its API (shared/reconciliation.py)."""
        return self.events_api is not None

    @property
    def all_options(self) -> tuple[Option, ...]:
        """Its credentials' option, then the others."""
        return ((self.credentials,) if self.credentials else ()) + self.options


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
