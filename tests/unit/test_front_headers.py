"""The fronts' environ (webhooks/shared/rsgi.py `environ`), from a request's headers as granian
hands them over: no header name stands in for another, and the work is bounded before it
is done (docs/guarantees.md, 5; security review 2026-12c, sections 2, 3 and 5)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from webhooks.shared import rsgi

# Every header a provider signs or the ingest trusts (shared/providers/*.py, the README's
# Providers table, TRUSTED_PROXIES), and the two that frame a body.
READ_HEADERS = (
    "Content-Length", "Content-Type", "Transfer-Encoding",
    "Stripe-Signature", "X-Hub-Signature-256", "X-GitHub-Delivery", "X-GitHub-Event",
    "X-Shopify-Hmac-Sha256", "X-Shopify-Webhook-Id", "X-Shopify-Topic",
    "Shopify-Hmac-Sha256", "Shopify-Webhook-Id", "Shopify-Topic",
    "Paddle-Signature", "X-Slack-Signature", "X-Slack-Request-Timestamp",
    "webhook-id", "webhook-timestamp", "webhook-signature",
    "svix-id", "svix-timestamp", "svix-signature", "X-Forwarded-For",
)


class Headers:
    """granian's RSGIHeaders as the front uses it: every (name, value), repeats included,
    names in lower case as hyper gives them."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = [(name.lower(), value) for name, value in pairs]

    def items(self) -> list[tuple[str, str]]:
        return list(self._pairs)


@dataclass
class Scope:
    headers: Headers
    proto: str = "http"
    method: str = "POST"
    path: str = "/webhooks/stripe"
    query_string: str = ""
    server: str = "127.0.0.1:8000"
    client: str = "127.0.0.1:50000"
    scheme: str = "http"
    http_version: str = "1.1"
    extra: dict[str, Any] = field(default_factory=dict)


def environ_of(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    return rsgi.environ(Scope(Headers(pairs)))


def key_of(header: str) -> str:
    key = header.upper().replace("-", "_")
    return key if key in ("CONTENT_LENGTH", "CONTENT_TYPE") else f"HTTP_{key}"


@pytest.mark.parametrize("header", READ_HEADERS)
@pytest.mark.parametrize("underscore_first", [False, True])
def test_a_name_with_underscores_never_stands_for_a_header_we_read(header: str,
                                                                   underscore_first: bool) -> None:
    """`Content_Length`, `X_Forwarded_For`, `Stripe_Signature`...: dropped, as PEP 3333
    servers do (werkzeug, gunicorn), whichever comes first; the real header keeps its value
    and nothing is joined to it."""
    real = (header, "12")
    forged = (header.replace("-", "_"), "3.3.3.3")
    environ = environ_of([forged, real] if underscore_first else [real, forged])
    assert environ[key_of(header)] == "12"
    alone = environ_of([forged])
    assert key_of(header) not in alone
    assert not any("3.3.3.3" in str(value) for value in alone.values())


def test_repeated_headers_are_joined_in_order() -> None:
    environ = environ_of([("X-Forwarded-For", "1.1.1.1"), ("Accept", "a"),
                          ("X-Forwarded-For", "2.2.2.2, 3.3.3.3")])
    assert environ["HTTP_X_FORWARDED_FOR"] == "1.1.1.1,2.2.2.2, 3.3.3.3"
    assert environ["HTTP_ACCEPT"] == "a"


def test_thirty_thousand_same_name_headers_are_refused_at_once() -> None:
    """Review 2026-12c section 3: 30,000 repeats of one 450-byte header took 88 s to join
    (quadratic, on the event loop). They are now refused before any per-header work."""
    pairs = [("x-a", "v" * 450)] * 30_000
    started = time.monotonic()
    with pytest.raises(rsgi.HeadersTooLarge):
        environ_of(pairs)
    assert time.monotonic() - started < 1.0


def test_more_headers_than_http1_allows_are_refused() -> None:
    environ_of([(f"x-{n}", "v") for n in range(rsgi.MAX_HEADERS)])
    with pytest.raises(rsgi.HeadersTooLarge):
        environ_of([(f"x-{n}", "v") for n in range(rsgi.MAX_HEADERS + 1)])


def test_header_bytes_are_bounded() -> None:
    environ_of([("x-big", "v" * (rsgi.MAX_HEADER_BYTES - 100))])
    with pytest.raises(rsgi.HeadersTooLarge):
        environ_of([("x-big", "v" * rsgi.MAX_HEADER_BYTES)])
