"""Stripe: `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">[,v1=...]`.

Verified with the `stripe` library against each of the source's secrets (rotation). The
library only rejects timestamps that are too old; we also reject ones too far ahead.

A source of thin events (an event destination, `STRIPE_<NAME>_EVENTS=thin`) is verified
and parsed by the library's own thin-event parser,
`StripeClient.parse_event_notification`, with the source's API key: what it refuses
(a snapshot event, `"object": "event"`, posted to a thin source; a thin event without
its `type`, `created` or `related_object`) is refused here with a 400, before anything
is recorded, as the SDK would refuse it in the job. Whatever the kind, the payload
recorded is the JSON exactly as sent (shared.payloads), never the library's objects. A
thin event posted to a snapshot source is Stripe's, signed with that source's secret: it
is recorded, and its job fetches it with that source's API key (before_handler,
shared/providers/stripe_thin.py), or fails at once, saying so, when the source has none.

Before a Stripe job's handler (before_handler): the source's livemode policy, then a thin
event's fetch. Reconciliation lists `GET /v1/events` (shared/providers/stripe_events.py).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from webhooks.shared import variables as v
from webhooks.shared.errors import InvalidPayload, InvalidSignature, PermanentJobError
from webhooks.shared.providers import stripe_thin
from webhooks.shared.providers.base import (
    Delivery,
    Headers,
    NoEffect,
    Option,
    PendingJob,
    Provider,
    SecretFormat,
    Source,
    check_timestamp,
    header,
    optional_type,
    parse_object,
    require_id,
)

if TYPE_CHECKING:
    import stripe as stripe_sdk

    from webhooks.shared.providers.events_api import EventsAPI

# How the outcome of a job whose event's livemode its source refused begins (before_handler
# writes it): done with no effect by design, which the audits of effects leave out.
LIVEMODE_REFUSED = "no effect: livemode"


class EventKind(StrEnum):
    """What a Stripe source receives: full events, or thin ones (an event destination)."""

    SNAPSHOT = "snapshot"
    THIN = "thin"


class Livemode(StrEnum):
    """Which of a Stripe source's events take effect (by the event's `livemode`)."""

    ANY = "any"
    LIVE = "live"
    TEST = "test"

    def accepts(self, livemode: bool | None) -> bool:
        """Whether an event of this livemode takes effect: `live` only livemode true,
        `test` only false (an event that does not say is neither), `any` every event."""
        if self is Livemode.ANY:
            return True
        return livemode is (self is Livemode.LIVE)


# The options a Stripe source takes (STRIPE_<NAME>_*; the default source's STRIPE_*).
API_KEY = Option(
    "api_key", "API_KEY", v.text, None,
    "a named Stripe source's API key (`GET /v1/events`; a thin source's fetches)",
    "unset: not reconciled", default_doc="a key that can read events (`GET /v1/events`, "
    "through the `stripe` library)", topic=v.Topic.RECONCILIATION,
    default_shown="unset: no Stripe reconciliation")
CONNECT = Option("connect", "CONNECT", v.flag, False, "`1`: a Connect endpoint (its events "
                 "name a connected `account`)", "`0`")
EVENTS = Option("events", "EVENTS", lambda raw: EventKind(v.choice(*EventKind)(raw)),
                EventKind.SNAPSHOT, "`snapshot` or `thin` (an event destination; needs "
                "`STRIPE_<NAME>_API_KEY`)", "`snapshot`")
LIVEMODE = Option(
    "livemode", "LIVEMODE", lambda raw: Livemode(v.choice(*Livemode)(raw)), Livemode.ANY,
    "`any`, `live` or `test`: which events take effect (the default source: "
    "`STRIPE_LIVEMODE`)", "`any`", default_doc="`any`, `live` or `test`: which of the "
    "default Stripe source's events take effect")


def verify(
    body: bytes, headers: Headers, source: Source, tolerance: int, now: float
) -> Delivery:
    signature = header(headers, "Stripe-Signature")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSignature("body is not UTF-8") from None
    check_timestamp(_timestamp(signature), tolerance, now)
    if EVENTS.of(source) is EventKind.THIN:
        index = _thin_notification(text, signature, source, tolerance)
    else:
        index = _first_valid(text, signature, source.secrets, tolerance)
    payload = parse_object(body)
    account, livemode = origin(payload, connect=CONNECT.of(source))
    return Delivery(
        event_id=require_id(payload.get("id"), "event id"),
        event_type=optional_type(payload.get("type")),
        payload=payload,
        secret_index=index,
        account=account,
        livemode=livemode,
    )


def origin(payload: dict[str, Any], *, connect: bool = True) -> tuple[str | None, bool | None]:
    """The event's connected account (a snapshot event's `account`, a thin event's
    `context`) and its `livemode`; None for what is absent or not of its type. `connect`
    False (a source that is not Connect, whose events are the platform's): a thin event's
    `context` is not taken, as its job does not fetch in it (`_context`)."""
    if not connect and payload.get("object") == "v2.core.event":
        payload = {key: value for key, value in payload.items() if key != "context"}
    account = payload.get("account", payload.get("context"))
    livemode = payload.get("livemode")
    return (account if isinstance(account, str) and account else None,
            livemode if isinstance(livemode, bool) else None)


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    timestamp = int(now)
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return {"Stripe-Signature": f"t={timestamp},v1={digest.hexdigest()}"}


def _timestamp(signature: str) -> str | None:
    """The one `t=`: the stripe library verifies the first part whose key is exactly `t`,
    so a header with another (` t=`, a second `t=`) could have this check look at a
    timestamp other than the signed one; it is refused."""
    found = [part.partition("=") for part in signature.split(",")
             if part.strip().partition("=")[0] == "t"]
    if not found:
        raise InvalidSignature("Stripe-Signature has no timestamp")
    if len(found) > 1 or found[0][0] != "t":
        raise InvalidSignature("Stripe-Signature must carry one timestamp, as `t=`")
    return found[0][2]


def _first_valid(text: str, signature: str, secrets: tuple[str, ...], tolerance: int) -> int:
    """The position of the first secret that verifies: a rotation is watched by which
    position is used. InvalidSignature when none does."""
    index = next((position for position, secret in enumerate(secrets)
                  if _valid(text, signature, secret, tolerance)), None)
    if index is None:
        raise InvalidSignature("no Stripe signature matches a configured secret")
    return index


def _thin_notification(text: str, signature: str, source: Source, tolerance: int) -> int:
    """The position of the first secret under which the library's thin-event parser
    accepts the delivery. A signature error under one secret tries the next; a signed body
    the parser refuses (not a thin event, a field missing) is InvalidPayload: a snapshot
    event at a thin source is refused, not recorded as a thin event that cannot be
    fetched."""
    import stripe as stripe_sdk  # only here: a slow import

    client = _thin_parser(source.credentials or "")
    for position, secret in enumerate(source.secrets):
        try:
            client.parse_event_notification(text, signature, secret, tolerance)
        except stripe_sdk.SignatureVerificationError:
            continue
        except ValueError as error:  # JSON, and "not a thin event notification"
            raise InvalidPayload(f"not a Stripe thin event: {_first_sentence(error)}"
                                 ) from None
        except (KeyError, TypeError, AttributeError, OverflowError, RecursionError) as error:
            raise InvalidPayload(f"not a Stripe thin event: {type(error).__name__} "
                                 f"{_first_sentence(error)}") from None
        return position
    raise InvalidSignature("no Stripe signature matches a configured secret")


def _first_sentence(error: Exception) -> str:
    return str(error).split(". ")[0][:200]


@functools.lru_cache(maxsize=8)
def _thin_parser(api_key: str) -> stripe_sdk.StripeClient:
    """One client per API key in a process, for parsing only: it makes no request here
    (the job fetches, shared/providers/stripe_thin.py)."""
    import stripe as stripe_sdk

    return stripe_sdk.StripeClient(api_key, max_network_retries=0)


def _valid(text: str, signature: str, secret: str, tolerance: int) -> bool:
    import stripe as stripe_sdk  # only here: a slow import

    try:
        stripe_sdk.WebhookSignature.verify_header(text, signature, secret, tolerance)
    except stripe_sdk.SignatureVerificationError:
        return False
    except (ValueError, TypeError, OverflowError):
        return False
    return True


def events_api(source: Source, api_base: str) -> EventsAPI:
    """`GET /v1/events` with the source's key; a thin source's `GET /v2/core/events`; a
    Connect source's `GET /v1/events` of each connected account (`Stripe-Account`)."""
    from webhooks.shared.providers import stripe_events  # the stripe library: a slow import

    api_key = source.credentials or ""
    if EVENTS.of(source) is EventKind.THIN:
        return stripe_events.thin_events(api_key, api_base)
    if CONNECT.of(source):
        return stripe_events.ConnectEvents(api_key, api_base)
    return stripe_events.StripeEvents(api_key, api_base)


def before_handler(job: PendingJob) -> Any | NoEffect:
    """A job done with no effect when its event's livemode is one its source does not
    accept: Stripe sends test-mode events of connected accounts to live Connect endpoints,
    and such an event must never credit the live ledger. Decided from the row's `livemode`
    (a thin event's own field, recorded at the ingest), before any fetch or handler; an
    event of a source no longer configured is not refused. Then a thin event a handler
    takes is fetched (stripe_thin.fetch bounds the wait; a failure is NotReady); a thin
    event of a type no handler names has nothing to apply, and needs no fetch (nor key)."""
    source = job.source
    policy = LIVEMODE.of(source) if source is not None else Livemode.ANY
    if source is not None and not policy.accepts(job.livemode):
        return NoEffect(f"{LIVEMODE_REFUSED} {str(job.livemode).lower()} refused by source "
                       f"{source.label} (livemode {policy})",
                       "event's livemode refused by its source, no effect",
                       {"source": source.label, "livemode": job.livemode,
                        "account": job.account})
    if not stripe_thin.is_thin(job.payload) or not job.handled:
        return job.payload
    if source is None or not source.credentials:
        raise PermanentJobError(f"a thin event of source {job.source_name!r} needs its API "
                                "key to fetch it")
    return stripe_thin.fetch(source.credentials, job.api_base or RECORD.api_base or "",
                             job.payload, _context(source, job.payload))


def _context(source: Source, thin: dict[str, Any]) -> str | None:
    """The connected account to fetch in (sent as Stripe-Context): the thin event's
    `context` at a Connect source (STRIPE_<NAME>_CONNECT=1); None elsewhere, whatever the
    event says: a source that is not Connect receives the platform's own events, and the
    platform's key must not act in an account a payload names (the ingest records no
    account for it either, `origin`)."""
    if not CONNECT.of(source):
        return None
    context = thin.get("context")
    return context if isinstance(context, str) and context else None


def _missing(source: Source) -> tuple[Option, str] | None:
    if EVENTS.of(source) is EventKind.THIN and not source.credentials:
        return API_KEY, f"thin source {source.label} fetches its events"
    return None


RECORD = Provider(
    name="stripe", title="Stripe",
    secret_variable="STRIPE_WEBHOOK_SECRET",  # noqa: S106 - the name of the variable
    secret_format=SecretFormat.WHSEC, verify=verify, sign=sign, signed_event_id=True,
    headers="`Stripe-Signature`", event_id="body `id`", event_type="body `type`",
    credentials=API_KEY, options=(CONNECT, EVENTS, LIVEMODE),
    api_base="https://api.stripe.com", events_api=events_api, events_api_needs=(API_KEY,),
    origin=origin, missing=_missing, before_handler=before_handler,
)
