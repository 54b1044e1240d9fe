"""Property tests: no request, however malformed, makes a provider raise anything but
InvalidSignature or InvalidPayload (which the ingest turns into a 400, never a 5xx).

The second property signs random bodies correctly, with the documented algorithms written
out here (the `standardwebhooks` library for Standard Webhooks), so that the code after
the signature check (JSON parsing, event id and type) is reached with hostile input too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook
from werkzeug.datastructures import Headers

from webhooks.shared.errors import InvalidPayload, InvalidSignature
from webhooks.shared.providers import PROVIDERS
from webhooks.shared.providers.base import Delivery
from webhooks.shared.sources import Source

NOW = int(time.time())
TOLERANCE = 300


@pytest.fixture(autouse=True)
def _current_clock() -> None:
    """NOW as of this test: the stripe library checks staleness against time.time()."""
    global NOW
    NOW = int(time.time())


SECRETS = {
    "stripe": ("whsec_one", "whsec_two"),
    "paddle": ("pdl_one", "pdl_two"),
    "shopify": ("shpss_one", "shpss_two"),
    "github": ("gh-one", "gh-two"),
    "slack": ("slack-one", "slack-two"),
    "standard": ("whsec_" + base64.b64encode(b"k" * 24).decode(), "whsec_dHdv"),
}
HEADER_NAMES = {
    "stripe": ["Stripe-Signature"],
    "paddle": ["Paddle-Signature"],
    "shopify": ["X-Shopify-Hmac-Sha256", "X-Shopify-Webhook-Id", "X-Shopify-Topic"],
    "github": ["X-Hub-Signature-256", "X-GitHub-Delivery", "X-GitHub-Event"],
    "slack": ["X-Slack-Signature", "X-Slack-Request-Timestamp"],
    "standard": ["webhook-id", "webhook-timestamp", "webhook-signature"],
}
# Beginnings that get past the first parsing step of some scheme.
PREFIXES = [
    f"t={NOW},v1=",
    f"ts={NOW};h1=",
    "sha256=",
    "v0=",
    "v1,",
    f"{NOW}",
    f"t={NOW},v1=00,v1=",
    f"ts={NOW};h1=00;h1=",
]
FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Werkzeug refuses header values with line breaks; a server never produces them.
characters = st.one_of(
    st.characters(exclude_characters="\r\n"),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
)
huge = st.builds(
    lambda c, n: c * n, st.characters(exclude_characters="\r\n"), st.integers(1, 100_000)
)
header_values = st.one_of(
    st.just(""),
    st.text(characters),
    st.text(characters, min_size=200, max_size=2000),
    huge,
    st.builds(lambda p, t: p + t, st.sampled_from(PREFIXES), st.text(characters)),
    st.integers(NOW - 2 * TOLERANCE, NOW + 2 * TOLERANCE).map(str),
    st.sampled_from(["0", "-1", "1e10", "nan", "inf", "9" * 4000, "1" * 5000, " " + str(NOW)]),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)
json_objects = st.dictionaries(
    st.sampled_from(["id", "event_id", "type", "event_type", "event", "challenge"]) | st.text(),
    json_values | st.text(characters) | huge,
    max_size=6,
)
bodies = st.one_of(
    st.binary(),
    st.binary(min_size=1000, max_size=20_000),
    st.builds(
        lambda obj, ascii: json.dumps(obj, ensure_ascii=ascii).encode("utf-8", "surrogatepass"),
        json_objects,
        st.booleans(),
    ),
    st.sampled_from([b"", b"{}", b"[]", b"null", b'"x"', b"\xff\xfe{\x00}\x00", b"{" * 5000]),
)


def _headers(values: dict[str, Any]) -> Headers:
    return Headers({key: value for key, value in values.items() if value is not None})


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_random_requests_are_only_ever_refused(provider: str) -> None:
    module = PROVIDERS[provider]
    names = HEADER_NAMES[provider]
    values = st.fixed_dictionaries({name: st.none() | header_values for name in names})

    @FUZZ
    @given(body=bodies, values=values)
    def check(body: bytes, values: dict[str, Any]) -> None:
        try:
            module.verify(body, _headers(values), Source(provider, provider, SECRETS[provider]),
                          TOLERANCE, NOW)
        except (InvalidSignature, InvalidPayload):
            pass

    check()


def _hmac(secret: str, message: bytes) -> bytes:
    return hmac.new(secret.encode(), message, hashlib.sha256).digest()


def _standard(body: bytes, secret: str, message_id: str) -> dict[str, str]:
    signed_at = datetime.fromtimestamp(NOW, tz=UTC)
    signature = Webhook(secret).sign(message_id, signed_at, body.decode("utf-8"))
    return {"webhook-id": message_id, "webhook-timestamp": str(NOW), "webhook-signature": signature}


# Each returns correct signature headers for (body, secret, an id header value).
SIGNERS: dict[str, Callable[[bytes, str, str], dict[str, str]]] = {
    "stripe": lambda body, secret, _: {
        "Stripe-Signature": f"t={NOW},v1={_hmac(secret, f'{NOW}.'.encode() + body).hex()}"
    },
    "paddle": lambda body, secret, _: {
        "Paddle-Signature": f"ts={NOW};h1={_hmac(secret, f'{NOW}:'.encode() + body).hex()}"
    },
    "shopify": lambda body, secret, _: {
        "X-Shopify-Hmac-Sha256": base64.b64encode(_hmac(secret, body)).decode()
    },
    "github": lambda body, secret, _: {
        "X-Hub-Signature-256": f"sha256={_hmac(secret, body).hex()}"
    },
    "slack": lambda body, secret, _: {
        "X-Slack-Request-Timestamp": str(NOW),
        "X-Slack-Signature": f"v0={_hmac(secret, f'v0:{NOW}:'.encode() + body).hex()}",
    },
    "standard": _standard,
}
# Providers that sign text: an undecodable body cannot carry a valid signature.
SIGNS_TEXT = {"stripe", "standard"}


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_signed_random_bodies_are_delivered_or_refused_as_payload(provider: str) -> None:
    module = PROVIDERS[provider]
    others = [
        name
        for name in HEADER_NAMES[provider]
        if name not in SIGNERS[provider](b"", SECRETS[provider][0], "x")
    ]

    @FUZZ
    @given(
        body=bodies,
        secret=st.sampled_from(SECRETS[provider]),
        # No lone surrogates: the test's own signer (the library) cannot encode them.
        message_id=st.text(st.characters(exclude_categories=("Cs",),
                                         exclude_characters="\r\n"), min_size=1),
        values=st.fixed_dictionaries({name: st.none() | header_values for name in others}),
    )
    def check(body: bytes, secret: str, message_id: str, values: dict[str, Any]) -> None:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            if provider in SIGNS_TEXT:
                return
        headers = _headers({**values, **SIGNERS[provider](body, secret, message_id)})
        try:
            delivery = module.verify(body, headers, Source(provider, provider, SECRETS[provider]),
                                     TOLERANCE, NOW)
        except InvalidPayload:
            return
        assert isinstance(delivery, Delivery)
        assert isinstance(delivery.payload, dict)

    check()
