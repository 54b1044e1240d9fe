"""POST /webhooks/<provider> (the provider's default source) and
/webhooks/<provider>/<source> (a named one): verify, record in one transaction,
acknowledge, wake a worker.

Order matters: the source address (before anything else: a sender outside the source's
allowlist learns nothing, not even whether the source is configured, and sends no body we
read; an unknown source's path takes its provider's allowlist), source configured (404),
size limit (from Content-Length, before reading), signature against that source's secrets
only (before any database access: an event signed for another source is refused), the one
transaction, and only after COMMIT the 200 and the wake-up.

Which source names exist is not told: a path under a provider that has a configured source
but naming none (`/webhooks/stripe/nosuch`) goes through the same checks as a configured
source, against a stand-in whose one secret is random and known to no one (`_stand_in`), so
its answer (403, 413, the provider's own 400 for the signature) is a configured source's,
byte for byte. It is counted and logged as what it is, not_configured. Only a provider with
no source at all is 404 (tests/integration/test_allowlist.py
test_a_configured_and_an_unknown_source_name_answer_alike).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
import sqlalchemy as sa
from flask import Blueprint, Flask, Response, current_app, request
from werkzeug.exceptions import HTTPException

from webhooks.ingest.allowlist import Allowlist
from webhooks.shared import metrics, providers, tracing
from webhooks.shared.errors import (
    DatabaseUnavailable,
    InvalidPayload,
    PayloadTooLarge,
    ProviderNotConfigured,
    RejectedDelivery,
)
from webhooks.shared.providers.base import Delivery, Headers
from webhooks.shared.recording import Origin, RecordingResult, record_event
from webhooks.shared.settings import Settings
from webhooks.shared.sources import Source

log = logging.getLogger(__name__)
blueprint = Blueprint("webhooks", __name__)
PATH_PREFIX = "/webhooks/"

RETRY_AFTER_SECONDS = "5"


def _kinds(kind: type[RejectedDelivery]) -> list[type[RejectedDelivery]]:
    return [found for sub in kind.__subclasses__() for found in (sub, *_kinds(sub))]


# The reasons webhooks_deliveries_rejected_total counts by: each kind of refusal's
# (shared/errors.py, a RejectedDelivery), then a 503's (`_refusal_reason`).
DATABASE, INTERNAL = "database", "internal"
REASONS = tuple(dict.fromkeys([*(kind.reason for kind in _kinds(RejectedDelivery)),
                               DATABASE, INTERNAL]))


def count_from_start(configured: list[Source]) -> None:
    """The ingest's counters at 0, from a server process's start, for what is configured
    (SPEC "Observability": a rule reads a series before anything has happened to it): each
    source's deliveries, duplicates and refusals by every reason (but not_configured: a
    path no source is configured at counts as source `unknown`, `_labels`), its secrets by
    position, and its provider's ack latency. In a multiprocess folder a labelled family
    none of the processes has a series of shows no sample at all (shared/metrics.py
    `render`)."""
    reasons = [reason for reason in REASONS if reason != ProviderNotConfigured.reason]
    for source in configured:
        labels = (source.provider, source.name)
        metrics.deliveries_received.labels(*labels)
        metrics.deliveries_duplicate.labels(*labels)
        for reason in reasons:
            metrics.deliveries_rejected.labels(*labels, reason)
        for position in range(1, len(source.secrets) + 1):
            metrics.signature_verified.labels(*labels, str(position))
        metrics.ack_latency.labels(source.provider)


@dataclass(frozen=True)
class Answer:
    """What a delivery is answered: status, headers, body (JSON)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def answer(app: Flask, provider: str, source: str | None, address: str | None,
           headers: Headers, body: bytes | Callable[[], bytes]) -> Answer:
    """The whole decision on one delivery to /webhooks/<provider>[/<source>], whoever
    serves it: the Flask route below, or the RSGI front (ingest.front) with the body it
    read on its event loop. `address` is the client's (REMOTE_ADDR as ProxyFix found it
    behind TRUSTED_PROXIES); `body` the bytes, or a function that reads them, called only
    once the checks before the body have passed. Every refusal is counted and answered
    here, a database outage is 503 with Retry-After, and an unexpected error is 503 too:
    nothing was committed, and the provider retries."""
    started = time.perf_counter()
    path = provider if source is None else f"{provider}/{source}"
    labels = _labels(app, provider, path)
    try:
        found = _check_before_body(app, provider, path, address,
                                   _content_length(headers))
        delivery, data = _verified_delivery(app, found, path, headers, body)
        _count_secret(found, delivery)
        if delivery.reply is not None:
            return _json(200, delivery.reply)
        recorded = record_event(app.extensions["engine"], provider,
                                delivery.event_id, delivery.event_type, data,
                                trace_context=tracing.traceparent(),
                                origin=Origin(found.name, delivery.account, delivery.livemode))
    except RejectedDelivery as error:
        _count_rejected(labels, error, address)
        refused = _json(error.status, {"error": str(error)})
        if error.status in (403, 413):  # the body was left unread
            refused.headers.append(CLOSE)
        return refused
    except DatabaseUnavailable as error:
        metrics.deliveries_rejected.labels(*labels, DATABASE).inc()
        log.error("database unavailable, answered 503", extra={"provider": labels[0],
                                                              "error": str(error)})
        return _json(503, {"error": "database unavailable"}, [RETRY_AFTER])
    except HTTPException:
        raise  # werkzeug's own answer (the route's reader past MAX_CONTENT_LENGTH: 413)
    except Exception as error:
        # Nothing was committed (the transaction rolled back); ask the provider to retry.
        log.exception("unexpected error")
        metrics.deliveries_rejected.labels(*labels, _refusal_reason(error)).inc()
        return _json(503, {"error": "internal error, retry later"}, [RETRY_AFTER])
    _after_commit(app, found, delivery, recorded)
    if tracing.enabled():
        tracing.annotate({"webhooks.provider": provider, "webhooks.event_id": delivery.event_id,
                          "webhooks.event_type": delivery.event_type,
                          "webhooks.duplicate": recorded.duplicate})
    metrics.ack_latency.labels(provider).observe(time.perf_counter() - started)
    return _json(200, {"event_id": recorded.event_id or delivery.event_id,
                       "duplicate": recorded.duplicate, "status": recorded.status})


@blueprint.post(f"{PATH_PREFIX}<provider>")
@blueprint.post(f"{PATH_PREFIX}<provider>/<source>")
def receive(provider: str, source: str | None = None) -> Response:
    """The route: an adapter from werkzeug's request and response to `answer`."""
    settings: Settings = current_app.extensions["settings"]
    answered = answer(current_app._get_current_object(),  # type: ignore[attr-defined]
                      provider, source, request.remote_addr, request.headers,
                      lambda: _read_body(settings.max_body_bytes))
    return Response(answered.body, answered.status, answered.headers)


# An answer's headers: JSON; the connection closed after a refusal that left the body
# unread (the server drops it rather than read the rest, and the client sends no more on
# it); when to retry after a 503.
JSON = ("Content-Type", "application/json")
CLOSE = ("Connection", "close")
RETRY_AFTER = ("Retry-After", RETRY_AFTER_SECONDS)


def _json(status: int, document: Mapping[str, Any],
          extra: list[tuple[str, str]] | None = None) -> Answer:
    return Answer(status, [JSON, *(extra or [])], json_body(document))


def json_body(document: Mapping[str, Any]) -> bytes:
    """`document` as Flask's jsonify writes it (sorted keys, compact, a newline at the
    end): every answer of the ingest's, from the route or the front, alike."""
    return (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode()


def _content_length(headers: Headers) -> int | None:
    """The declared Content-Length; None without one or for a malformed one, as werkzeug
    reads it (the front refuses a malformed one before reading)."""
    length = headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def count_unexpected_refusal(error: BaseException) -> None:
    """A delivery answered 503 by the app's error handler is counted too, by cause: a
    database error anywhere in its chain is reason="database" (as DatabaseUnavailable is),
    anything else reason="internal"."""
    if request.blueprint != blueprint.name:
        return
    args = request.view_args or {}
    provider = args.get("provider") or ""
    path = f"{provider}/{args['source']}" if args.get("source") else provider
    metrics.deliveries_rejected.labels(*_labels(current_app, provider, path),
                                       _refusal_reason(error)).inc()


def _refusal_reason(error: BaseException | None) -> str:
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, DatabaseUnavailable | sa.exc.SQLAlchemyError | psycopg.Error):
            return DATABASE
        error = error.__cause__ or error.__context__
        seen += 1
    return INTERNAL


def provider_of(path: str) -> tuple[str, str] | None:
    """The provider a path delivers for and the source's label (`/webhooks/<provider>`,
    `/webhooks/<provider>/<source>`), else None."""
    label = path.removeprefix(PATH_PREFIX)
    provider, slash, name = label.partition("/")
    if label == path or not provider or "/" in name or (slash and not name):
        return None
    return provider, label


def refusal(app: Flask, environ: dict[str, Any]) -> tuple[int, dict[str, str]] | None:
    """For a front that reads bodies itself (ingest.front): what a delivery gets from its
    headers alone, before its body is read (403, 404, 413), counted as the route counts
    it; None to read the body and run the app."""
    target = provider_of(environ.get("PATH_INFO", ""))
    if target is None or environ.get("REQUEST_METHOD") != "POST":
        return None
    provider, path = target
    address = app.extensions["client_address"](environ)
    length = environ.get("CONTENT_LENGTH")
    try:
        _check_before_body(app, provider, path, address, int(length) if length else None)
    except ValueError:
        return None  # a malformed Content-Length: werkzeug answers it as the app would
    except RejectedDelivery as error:
        _count_rejected(_labels(app, provider, path), error, address)
        return error.status, {"error": str(error)}
    return None


def count_rejected(app: Flask, environ: dict[str, Any], error: RejectedDelivery) -> None:
    """A delivery the front refused while reading its body (ingest.front), counted and
    logged as the route counts its own refusals; nothing for other paths."""
    target = provider_of(environ.get("PATH_INFO", ""))
    if target is not None:
        _count_rejected(_labels(app, *target), error, app.extensions["client_address"](environ))


def _labels(app: Flask, provider: str, path: str) -> tuple[str, str]:
    """The metric labels (provider, source) of a path: only known providers and configured
    sources (the registry bounds them; a source is named by its name, the provider's for
    its default source), else "unknown": a scanner's paths add no series."""
    found: Source | None = app.extensions["sources"].get(path)
    return (provider if provider in providers.PROVIDERS else "unknown",
            found.name if found else "unknown")


def _check_before_body(app: Flask, provider: str, path: str, address: str | None,
                       content_length: int | None) -> Source:
    """In order, before anything is read: SourceNotAllowed when the source (`path`, its
    label) has an allowlist and the client (REMOTE_ADDR as ProxyFix found it behind
    TRUSTED_PROXIES) is outside it; ProviderNotConfigured for an unknown or unconfigured
    source; PayloadTooLarge from Content-Length. The source, from the dict built once."""
    found: Source | None = app.extensions["sources"].get(path)
    allowlists = app.extensions["allowlists"]
    allowlist: Allowlist | None = allowlists.get(path if found else provider)
    if allowlist is not None:
        allowlist.check(address, path)
    if found is None:
        found = _stand_in(app, provider)
        if found is None:
            raise ProviderNotConfigured(f"source {path!r} is unknown or not configured")
    settings: Settings = app.extensions["settings"]
    if content_length is not None and content_length > settings.max_body_bytes:
        too_large = PayloadTooLarge(f"body over {settings.max_body_bytes} bytes")
        raise _unknown(path, too_large) if found.name == STAND_IN else too_large
    return found


# The name of an unknown source's stand-in: not a source name (shared/sources.py NAME), so
# no configured source is ever taken for it.
STAND_IN = "-"


class UnknownSource(ProviderNotConfigured):
    """An unknown source's refusal: answered as its stand-in's checks answered (a configured
    source's status and text), counted and logged as not_configured."""

    def __init__(self, path: str, answered: RejectedDelivery) -> None:
        super().__init__(str(answered))
        self.status = answered.status
        self.logged = f"source {path!r} is unknown or not configured"


def _unknown(path: str, answered: RejectedDelivery) -> UnknownSource:
    return UnknownSource(path, answered)


def _stand_in(app: Flask, provider: str) -> Source | None:
    """For a known provider with a configured source: the source an unknown source's path
    is checked against, with one secret generated at random here and kept nowhere, so that
    no delivery verifies; None for a provider with no source (its paths are 404). One per
    provider in a process, made on first use."""
    if provider not in providers.PROVIDERS:
        return None
    made: dict[str, Source | None] = app.extensions.setdefault("stand_in_sources", {})
    if provider not in made:
        configured = any(source.provider == provider
                         for source in app.extensions["sources"].values())
        secret = providers.PROVIDERS[provider].secret_format.generate()
        made[provider] = Source(provider, STAND_IN, (secret,)) if configured else None
    return made[provider]


def _count_rejected(labels: tuple[str, str], error: RejectedDelivery,
                    address: str | None) -> None:
    metrics.deliveries_rejected.labels(*labels, error.reason).inc()
    log.info("delivery rejected", extra={"provider": labels[0], "source": labels[1],
                                         "reason": getattr(error, "logged", None) or str(error),
                                         "address": address})


def _count_secret(source: Source, delivery: Delivery) -> None:
    """Which of the source's secrets verified it, by 1-based position (never the secret):
    during a rotation, the old one's count falling to zero says it can be removed."""
    position = str(delivery.secret_index + 1)
    metrics.signature_verified.labels(source.provider, source.name, position).inc()
    log.debug("signature verified", extra={"provider": source.provider, "source": source.name,
                                           "secret_position": position,
                                           "event_id": delivery.event_id})


def _verified_delivery(app: Flask, source: Source, path: str, headers: Headers,
                       body: bytes | Callable[[], bytes]) -> tuple[Delivery, bytes]:
    """The delivery its provider's signature check made of the body, under the source's
    own secrets only (a delivery signed for another source fails), and the body."""
    settings: Settings = app.extensions["settings"]
    module = providers.PROVIDERS[source.provider]  # a configured source's provider exists
    try:
        data = body if isinstance(body, bytes) else body()
        delivery: Delivery = module.verify(
            data, headers, source, settings.tolerance_seconds, time.time()
        )
    except RejectedDelivery as error:
        if source.name == STAND_IN:
            raise _unknown(path, error) from None
        raise
    if source.name == STAND_IN:  # no one has its secret: never, but never recorded either
        raise ProviderNotConfigured("source is unknown or not configured")
    return delivery, data


def _read_body(limit: int) -> bytes:
    """The body, refusing anything over limit: from Content-Length without reading, and
    for a chunked body by reading at most limit + 1 bytes. One read() may return less than
    asked (a chunk), so read until limit + 1 bytes or the end."""
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLarge(f"body over {limit} bytes")
    # With a Content-Length the server's own input ends at it (PEP 3333); werkzeug's
    # wrapper, which costs a few % of a request's CPU, is needed only for a chunked body.
    stream = request.stream if length is None else request.environ["wsgi.input"]
    wanted = limit + 1 if length is None else length
    chunks: list[bytes] = []
    size = 0
    while size < wanted:
        chunk = stream.read(wanted - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    body = b"".join(chunks)
    if len(body) > limit:
        raise PayloadTooLarge(f"body over {limit} bytes")
    if length is not None and len(body) < length:
        raise InvalidPayload("body shorter than its Content-Length (client went away)")
    return body


def close_connection(response: Response) -> None:
    """For a refused body left unread: the server drops the connection after this answer
    rather than read the rest; the header tells the client not to send on it again."""
    response.headers["Connection"] = "close"


def _after_commit(app: Flask, source: Source, delivery: Delivery,
                  recorded: RecordingResult) -> None:
    """Counted, logged at DEBUG (the events table records every delivery, the counters
    count them), and the new job's worker woken."""
    labels = (source.provider, source.name)
    if recorded.duplicate:
        metrics.deliveries_duplicate.labels(*labels).inc()
    else:
        metrics.deliveries_received.labels(*labels).inc()
        if recorded.job_id is not None:
            app.extensions["waker"].wake(recorded.job_id)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("duplicate delivery" if recorded.duplicate else "event recorded",
                  extra={"provider": source.provider, "source": source.name,
                         "event_id": delivery.event_id, "job_id": recorded.job_id,
                         "event_type": delivery.event_type, "status": recorded.status})
