"""Signature schemes of every provider, checked against the providers' documented algorithms.

Every signature here is made independently of the code under test: the documented HMAC
written out inline, and for Standard Webhooks the `standardwebhooks` library's own signing.
Only the round-trip tests at the end use the project's sign().

NOW is the real clock: the `stripe` library checks staleness against time.time(), not
against the `now` it is given.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType

import pytest
from standardwebhooks.webhooks import Webhook
from werkzeug.datastructures import Headers

from webhooks.shared.errors import InvalidPayload, InvalidSignature
from webhooks.shared.providers import PROVIDERS, github, paddle, shopify, slack, standard, stripe
from webhooks.shared.providers.stripe import EventKind
from webhooks.shared.sources import Source

NOW = int(time.time())
TOLERANCE = 300


@pytest.fixture(autouse=True)
def _current_clock() -> None:
    """NOW as of this test: the stripe library checks staleness against time.time()."""
    global NOW
    NOW = int(time.time())


def _hmac(secret: str | bytes, message: bytes) -> bytes:
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, message, hashlib.sha256).digest()


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def _whsec(key: bytes) -> str:
    return "whsec_" + _b64(key)


@dataclass(frozen=True)
class Scheme:
    module: ModuleType
    body: bytes
    event_id: str
    event_type: str
    key: str
    old_key: str
    wrong_key: str
    # The raw HMAC for (body, secret, timestamp), per the provider's documentation.
    digest: Callable[[bytes, str, int], bytes]
    # The request headers carrying the given digests (several, where the scheme allows).
    headers: Callable[[bytes, list[bytes], int], Headers]
    signature_headers: tuple[str, ...]
    timed: bool
    multi: bool
    # (header, value) replacements that must be refused; {ts}, {hex} and {b64} are the
    # timestamp and the valid digest, so each case differs from a good one only in form.
    malformed: tuple[tuple[str, str], ...]

    def sign(self, body: bytes, secrets: list[str], ts: int | None = None) -> Headers:
        ts = NOW if ts is None else ts
        return self.headers(body, [self.digest(body, secret, ts) for secret in secrets], ts)

    def verify(self, body: bytes, headers: Headers, secrets: tuple[str, ...] | None = None):
        secrets = (self.key,) if secrets is None else secrets
        return self.module.verify(body, headers, Source(self.name, self.name, secrets), TOLERANCE,
                                  NOW)

    @property
    def name(self) -> str:
        return self.module.RECORD.name


def _stripe_headers(body: bytes, digests: list[bytes], ts: int) -> Headers:
    return Headers({"Stripe-Signature": f"t={ts}," + ",".join(f"v1={d.hex()}" for d in digests)})


def _paddle_headers(body: bytes, digests: list[bytes], ts: int) -> Headers:
    return Headers({"Paddle-Signature": f"ts={ts};" + ";".join(f"h1={d.hex()}" for d in digests)})


def _shopify_headers(body: bytes, digests: list[bytes], ts: int) -> Headers:
    return Headers(
        {
            # Two digests can only arrive as repeated headers joined by a proxy.
            "X-Shopify-Hmac-Sha256": ",".join(_b64(d) for d in digests),
            "X-Shopify-Webhook-Id": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
            "X-Shopify-Topic": "orders/create",
        }
    )


def _github_headers(body: bytes, digests: list[bytes], ts: int) -> Headers:
    return Headers(
        {
            "X-Hub-Signature-256": ",".join(f"sha256={d.hex()}" for d in digests),
            "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
            "X-GitHub-Event": "push",
        }
    )


def _slack_headers(body: bytes, digests: list[bytes], ts: int) -> Headers:
    return Headers(
        {
            "X-Slack-Request-Timestamp": str(ts),
            "X-Slack-Signature": ",".join(f"v0={d.hex()}" for d in digests),
        }
    )


STANDARD_ID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f1W"


def _standard_digest(body: bytes, secret: str, ts: int) -> bytes:
    signed_at = datetime.fromtimestamp(ts, tz=UTC)
    signature = Webhook(secret).sign(STANDARD_ID, signed_at, body.decode())
    version, _, b64 = signature.partition(",")
    assert version == "v1"
    return base64.b64decode(b64)


def _standard_headers(body: bytes, digests: list[bytes], ts: int) -> Headers:
    return Headers(
        {
            "webhook-id": STANDARD_ID,
            "webhook-timestamp": str(ts),
            "webhook-signature": " ".join(f"v1,{_b64(d)}" for d in digests),
        }
    )


SCHEMES = [
    Scheme(
        module=stripe,
        body=json.dumps({"id": "evt_1", "type": "invoice.paid", "data": {}}).encode(),
        event_id="evt_1",
        event_type="invoice.paid",
        key="whsec_new",
        old_key="whsec_old",
        wrong_key="whsec_wrong",
        digest=lambda body, secret, ts: _hmac(secret, f"{ts}.".encode() + body),
        headers=_stripe_headers,
        signature_headers=("Stripe-Signature",),
        timed=True,
        multi=True,
        malformed=(
            ("Stripe-Signature", "garbage"),
            ("Stripe-Signature", "t={ts}"),
            ("Stripe-Signature", "v1={hex}"),
            ("Stripe-Signature", "t=soon,v1={hex}"),
            ("Stripe-Signature", "t={ts},v0={hex}"),
            ("Stripe-Signature", "t={ts},v1={b64}"),
            ("Stripe-Signature", "t={ts},v1=é{hex}"),
        ),
    ),
    Scheme(
        module=paddle,
        body=json.dumps(
            {"event_id": "evt_01h", "event_type": "transaction.completed", "data": {}}
        ).encode(),
        event_id="evt_01h",
        event_type="transaction.completed",
        key="pdl_ntfset_new",
        old_key="pdl_ntfset_old",
        wrong_key="pdl_ntfset_wrong",
        digest=lambda body, secret, ts: _hmac(secret, f"{ts}:".encode() + body),
        headers=_paddle_headers,
        signature_headers=("Paddle-Signature",),
        timed=True,
        multi=True,
        malformed=(
            ("Paddle-Signature", "garbage"),
            ("Paddle-Signature", "ts={ts}"),
            ("Paddle-Signature", "h1={hex}"),
            ("Paddle-Signature", "ts=soon;h1={hex}"),
            ("Paddle-Signature", "ts={ts},h1={hex}"),
            ("Paddle-Signature", "ts={ts};ts={ts};h1={hex}"),
            ("Paddle-Signature", "ts={ts};h2={hex}"),
            ("Paddle-Signature", "ts={ts};h1={b64}"),
            ("Paddle-Signature", "ts={ts};h1=é{hex}"),
        ),
    ),
    Scheme(
        module=shopify,
        body=json.dumps({"id": 820982911946154508, "email": "jon@example.com"}).encode(),
        event_id="b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
        event_type="orders/create",
        key="shpss_new",
        old_key="shpss_old",
        wrong_key="shpss_wrong",
        digest=lambda body, secret, ts: _hmac(secret, body),
        headers=_shopify_headers,
        signature_headers=("X-Shopify-Hmac-Sha256",),
        timed=False,
        multi=False,
        malformed=(
            ("X-Shopify-Hmac-Sha256", "garbage"),
            ("X-Shopify-Hmac-Sha256", "{hex}"),
            ("X-Shopify-Hmac-Sha256", "sha256={b64}"),
            ("X-Shopify-Hmac-Sha256", "{b64}=="),
            ("X-Shopify-Hmac-Sha256", "é{b64}"),
        ),
    ),
    Scheme(
        module=github,
        body=json.dumps({"ref": "refs/heads/main", "after": "0000"}).encode(),
        event_id="72d3162e-cc78-11e3-81ab-4c9367dc0958",
        event_type="push",
        key="gh-new",
        old_key="gh-old",
        wrong_key="gh-wrong",
        digest=lambda body, secret, ts: _hmac(secret, body),
        headers=_github_headers,
        signature_headers=("X-Hub-Signature-256",),
        timed=False,
        multi=False,
        malformed=(
            ("X-Hub-Signature-256", "garbage"),
            ("X-Hub-Signature-256", "{hex}"),
            ("X-Hub-Signature-256", "sha1={hex}"),
            ("X-Hub-Signature-256", "sha256={b64}"),
            ("X-Hub-Signature-256", "sha256="),
            ("X-Hub-Signature-256", "sha256={hex}00"),
            ("X-Hub-Signature-256", "sha256=é{hex}"),
        ),
    ),
    Scheme(
        module=slack,
        body=json.dumps(
            {
                "type": "event_callback",
                "event_id": "Ev0PV52K21",
                "event": {"type": "app_mention", "text": "hi"},
            }
        ).encode(),
        event_id="Ev0PV52K21",
        event_type="app_mention",
        key="8f742231b10e8888abcd99yyyzzz85a5",
        old_key="0123456789abcdef0123456789abcdef",
        wrong_key="ffffffffffffffffffffffffffffffff",
        digest=lambda body, secret, ts: _hmac(secret, f"v0:{ts}:".encode() + body),
        headers=_slack_headers,
        signature_headers=("X-Slack-Signature", "X-Slack-Request-Timestamp"),
        timed=True,
        multi=False,
        malformed=(
            ("X-Slack-Signature", "garbage"),
            ("X-Slack-Signature", "{hex}"),
            ("X-Slack-Signature", "v1={hex}"),
            ("X-Slack-Signature", "v0={b64}"),
            ("X-Slack-Signature", "v0=é{hex}"),
            ("X-Slack-Request-Timestamp", "soon"),
            ("X-Slack-Request-Timestamp", "{ts}.0"),
            ("X-Slack-Request-Timestamp", "+{ts}"),
        ),
    ),
    Scheme(
        module=standard,
        body=json.dumps({"type": "user.created", "data": {"id": "user_1"}}).encode(),
        event_id=STANDARD_ID,
        event_type="user.created",
        key=_whsec(b"new-key-0123456789abcdef"),
        old_key=_whsec(b"old-key-0123456789abcdef"),
        wrong_key=_whsec(b"wrong-key-0123456789abcd"),
        digest=_standard_digest,
        headers=_standard_headers,
        signature_headers=("webhook-signature", "webhook-timestamp", "webhook-id"),
        timed=True,
        multi=True,
        malformed=(
            ("webhook-signature", "garbage"),
            ("webhook-signature", "{b64}"),
            ("webhook-signature", "v2,{b64}"),
            ("webhook-signature", "v1,{hex}"),
            ("webhook-signature", "v1,{b64},extra"),
            ("webhook-signature", "v1;{b64}"),
            ("webhook-signature", "v1,"),
            ("webhook-signature", "v1,é{b64}"),
            ("webhook-timestamp", "soon"),
            # The library would accept this (it parses float() and signs the floor).
            ("webhook-timestamp", "{ts}.0"),
            ("webhook-timestamp", "{ts}e0"),
            # int() takes these, and the library would sign them as "{ts}".
            ("webhook-timestamp", "+{ts}"),
            ("webhook-timestamp", "0{ts}"),
        ),
    ),
]

TIMED = [scheme for scheme in SCHEMES if scheme.timed]
MULTI = [scheme for scheme in SCHEMES if scheme.multi]
SINGLE = [scheme for scheme in SCHEMES if not scheme.multi]
MALFORMED = [
    pytest.param(scheme, case, id=f"{scheme.name}-{case[0]}-{case[1]}")
    for scheme in SCHEMES
    for case in scheme.malformed
]
MISSING = [
    pytest.param(scheme, name, id=f"{scheme.name}-{name}")
    for scheme in SCHEMES
    for name in scheme.signature_headers
]


def _ids(schemes: list[Scheme]) -> list[str]:
    return [scheme.name for scheme in schemes]


def _assert_delivered(scheme: Scheme, body: bytes, headers: Headers, secrets=None) -> None:
    delivery = scheme.verify(body, headers, secrets)
    assert delivery.event_id == scheme.event_id
    assert delivery.event_type == scheme.event_type
    assert delivery.payload == json.loads(body)
    assert delivery.reply is None


def test_every_provider_is_registered() -> None:
    assert set(PROVIDERS) == {"stripe", "paddle", "shopify", "github", "slack", "standard"}
    for scheme in SCHEMES:
        assert PROVIDERS[scheme.name] is scheme.module.RECORD


@pytest.mark.parametrize("scheme", SCHEMES, ids=_ids(SCHEMES))
def test_valid_delivery(scheme: Scheme) -> None:
    _assert_delivered(scheme, scheme.body, scheme.sign(scheme.body, [scheme.key]))


@pytest.mark.parametrize("scheme", SCHEMES, ids=_ids(SCHEMES))
def test_wrong_secret(scheme: Scheme) -> None:
    headers = scheme.sign(scheme.body, [scheme.wrong_key])
    with pytest.raises(InvalidSignature):
        scheme.verify(scheme.body, headers)


@pytest.mark.parametrize("scheme", SCHEMES, ids=_ids(SCHEMES))
def test_tampered_body(scheme: Scheme) -> None:
    headers = scheme.sign(scheme.body, [scheme.key])
    tampered = scheme.body.replace(b"}", b', "extra": 1}', 1)
    with pytest.raises(InvalidSignature):
        scheme.verify(tampered, headers)


@pytest.mark.parametrize("scheme", TIMED, ids=_ids(TIMED))
@pytest.mark.parametrize("offset", [-TOLERANCE - 1, TOLERANCE + 1, -86_400, 86_400])
def test_timestamp_outside_tolerance(scheme: Scheme, offset: int) -> None:
    headers = scheme.sign(scheme.body, [scheme.key], NOW + offset)
    with pytest.raises(InvalidSignature):
        scheme.verify(scheme.body, headers)


@pytest.mark.parametrize("scheme", TIMED, ids=_ids(TIMED))
@pytest.mark.parametrize("offset", [-TOLERANCE + 5, TOLERANCE])
def test_timestamp_at_the_edge_of_tolerance(scheme: Scheme, offset: int) -> None:
    # -TOLERANCE + 5, not -TOLERANCE: the stripe library re-reads the clock.
    _assert_delivered(scheme, scheme.body, scheme.sign(scheme.body, [scheme.key], NOW + offset))


@pytest.mark.parametrize(("scheme", "missing"), MISSING)
def test_missing_header(scheme: Scheme, missing: str) -> None:
    headers = scheme.sign(scheme.body, [scheme.key])
    del headers[missing]
    with pytest.raises(InvalidSignature):
        scheme.verify(scheme.body, headers)


@pytest.mark.parametrize(("scheme", "case"), MALFORMED)
def test_malformed_header(scheme: Scheme, case: tuple[str, str]) -> None:
    digest = scheme.digest(scheme.body, scheme.key, NOW)
    headers = scheme.sign(scheme.body, [scheme.key])
    name, template = case
    headers[name] = template.format(ts=NOW, hex=digest.hex(), b64=_b64(digest))
    with pytest.raises(InvalidSignature):
        scheme.verify(scheme.body, headers)


@pytest.mark.parametrize("scheme", MULTI, ids=_ids(MULTI))
def test_two_signatures_one_valid(scheme: Scheme) -> None:
    for order in ([scheme.wrong_key, scheme.key], [scheme.key, scheme.wrong_key]):
        _assert_delivered(scheme, scheme.body, scheme.sign(scheme.body, order))


@pytest.mark.parametrize("scheme", MULTI, ids=_ids(MULTI))
def test_two_signatures_none_valid(scheme: Scheme) -> None:
    headers = scheme.sign(scheme.body, [scheme.wrong_key, scheme.old_key])
    with pytest.raises(InvalidSignature):
        scheme.verify(scheme.body, headers)


@pytest.mark.parametrize("scheme", SINGLE, ids=_ids(SINGLE))
def test_two_signatures_refused_where_the_scheme_has_one(scheme: Scheme) -> None:
    # A proxy joins repeated headers with a comma; the scheme defines one signature, so a
    # list is malformed even when one element is right.
    headers = scheme.sign(scheme.body, [scheme.wrong_key, scheme.key])
    with pytest.raises(InvalidSignature):
        scheme.verify(scheme.body, headers)


@pytest.mark.parametrize("scheme", SCHEMES, ids=_ids(SCHEMES))
def test_rotation_accepts_either_configured_secret(scheme: Scheme) -> None:
    configured = (scheme.old_key, scheme.key)
    for secret in configured:
        _assert_delivered(scheme, scheme.body, scheme.sign(scheme.body, [secret]), configured)
    headers = scheme.sign(scheme.body, [scheme.wrong_key])
    with pytest.raises(InvalidSignature):
        scheme.verify(scheme.body, headers, configured)


@pytest.mark.parametrize("scheme", SCHEMES, ids=_ids(SCHEMES))
@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'"text"', b"{"])
def test_signed_body_that_is_not_a_json_object(scheme: Scheme, body: bytes) -> None:
    with pytest.raises(InvalidPayload):
        scheme.verify(body, scheme.sign(body, [scheme.key]))


@pytest.mark.parametrize("scheme", SCHEMES, ids=_ids(SCHEMES))
def test_signed_body_that_is_not_utf8(scheme: Scheme) -> None:
    body = b'{"id": "\xff"}'
    if scheme.name in {"stripe", "standard"}:
        # Both sign text; neither the libraries nor we can sign undecodable bytes.
        headers = scheme.headers(body, [_hmac(scheme.key, body)], NOW)
        with pytest.raises(InvalidSignature):
            scheme.verify(body, headers)
        return
    with pytest.raises(InvalidPayload):
        scheme.verify(body, scheme.sign(body, [scheme.key]))


BODY_ID_FIELDS = {"stripe": "id", "paddle": "event_id", "slack": "event_id"}
HEADER_ID_FIELDS = {
    "shopify": "X-Shopify-Webhook-Id",
    "github": "X-GitHub-Delivery",
    "standard": "webhook-id",
}


BODY_ID = [scheme for scheme in SCHEMES if scheme.name in BODY_ID_FIELDS]
HEADER_ID = [scheme for scheme in SCHEMES if scheme.name in HEADER_ID_FIELDS]
BAD_IDS = ["", "   ", "x" * 256, "a\x00b"]


@pytest.mark.parametrize("scheme", BODY_ID, ids=_ids(BODY_ID))
@pytest.mark.parametrize("bad_id", [None, 42, *BAD_IDS])
def test_missing_or_invalid_event_id_in_body(scheme: Scheme, bad_id: object) -> None:
    payload = json.loads(scheme.body)
    if bad_id is None:
        del payload[BODY_ID_FIELDS[scheme.name]]
    else:
        payload[BODY_ID_FIELDS[scheme.name]] = bad_id
    body = json.dumps(payload).encode()
    with pytest.raises(InvalidPayload):
        scheme.verify(body, scheme.sign(body, [scheme.key]))


@pytest.mark.parametrize("scheme", HEADER_ID, ids=_ids(HEADER_ID))
@pytest.mark.parametrize("bad_id", BAD_IDS)
def test_invalid_event_id_in_header(scheme: Scheme, bad_id: str) -> None:
    headers = scheme.sign(scheme.body, [scheme.key])
    name = HEADER_ID_FIELDS[scheme.name]
    headers[name] = bad_id
    if scheme.name == "standard":
        # webhook-id is signed: sign again over the bad id, with the library.
        signed_at = datetime.fromtimestamp(NOW, tz=UTC)
        signature = Webhook(scheme.key).sign(bad_id, signed_at, scheme.body.decode())
        headers["webhook-signature"] = signature
    with pytest.raises((InvalidPayload, InvalidSignature)) as raised:
        scheme.verify(scheme.body, headers)
    # An empty header counts as missing, which for standard means unsigned.
    expected = InvalidSignature if scheme.name == "standard" and not bad_id else InvalidPayload
    assert raised.type is expected


@pytest.mark.parametrize("scheme", [s for s in HEADER_ID if not s.timed], ids=["shopify", "github"])
def test_missing_event_id_header(scheme: Scheme) -> None:
    headers = scheme.sign(scheme.body, [scheme.key])
    del headers[HEADER_ID_FIELDS[scheme.name]]
    with pytest.raises(InvalidPayload):
        scheme.verify(scheme.body, headers)


@pytest.mark.parametrize("scheme", SCHEMES, ids=_ids(SCHEMES))
def test_event_type_missing_is_unknown(scheme: Scheme) -> None:
    payload = json.loads(scheme.body)
    for key in ("type", "event_type", "event"):
        payload.pop(key, None)
    body = json.dumps(payload).encode()
    headers = scheme.sign(body, [scheme.key])
    for name in ("X-Shopify-Topic", "X-GitHub-Event"):
        headers.pop(name, None)
    delivery = scheme.verify(body, headers)
    assert delivery.event_type == "unknown"


# Provider-specific behaviour.


def _slack() -> Scheme:
    return next(scheme for scheme in SCHEMES if scheme.name == "slack")


def _standard() -> Scheme:
    return next(scheme for scheme in SCHEMES if scheme.name == "standard")


def test_slack_url_verification_is_answered_with_its_challenge() -> None:
    scheme = _slack()
    payload = {
        "token": "Jhj5dZrVaK7",
        "challenge": "3eZbrw1aBm2rZgRNFdx",
        "type": "url_verification",
    }
    body = json.dumps(payload).encode()
    delivery = scheme.verify(body, scheme.sign(body, [scheme.key]))
    assert delivery.reply == {"challenge": "3eZbrw1aBm2rZgRNFdx"}
    assert delivery.event_id == ""
    assert delivery.event_type == "url_verification"


def test_slack_url_verification_needs_a_valid_signature() -> None:
    scheme = _slack()
    body = json.dumps({"challenge": "abc", "type": "url_verification"}).encode()
    with pytest.raises(InvalidSignature):
        scheme.verify(body, scheme.sign(body, [scheme.wrong_key]))


@pytest.mark.parametrize("challenge", [None, "", 7, {"a": 1}])
def test_slack_url_verification_without_a_usable_challenge(challenge: object) -> None:
    scheme = _slack()
    payload: dict[str, object] = {"type": "url_verification"}
    if challenge is not None:
        payload["challenge"] = challenge
    body = json.dumps(payload).encode()
    with pytest.raises(InvalidPayload):
        scheme.verify(body, scheme.sign(body, [scheme.key]))


def test_slack_form_encoded_body_is_not_an_event() -> None:
    scheme = _slack()
    body = b"token=abc&team_id=T1&command=%2Fweather&text=94070"
    with pytest.raises(InvalidPayload):
        scheme.verify(body, scheme.sign(body, [scheme.key]))


def test_slack_event_type_comes_from_the_inner_event() -> None:
    scheme = _slack()
    payload = json.loads(scheme.body)
    payload["event"] = "not an object"
    body = json.dumps(payload).encode()
    assert scheme.verify(body, scheme.sign(body, [scheme.key])).event_type == "unknown"


def keyed(key: str, provider: str = "standard") -> Source:
    return Source(provider, provider, (key,))


def test_standard_tolerance_wider_than_the_library_window() -> None:
    # The library's own verify() only allows 5 minutes against the wall clock.
    scheme = _standard()
    headers = scheme.sign(scheme.body, [scheme.key], NOW - 3000)
    delivery = standard.verify(scheme.body, headers, keyed(scheme.key), 3600, NOW)
    assert delivery.event_id == STANDARD_ID


def test_standard_tolerance_narrower_than_the_library_window() -> None:
    scheme = _standard()
    headers = scheme.sign(scheme.body, [scheme.key], NOW - 120)
    with pytest.raises(InvalidSignature):
        standard.verify(scheme.body, headers, keyed(scheme.key), 60, NOW)


def test_standard_uses_the_given_now_not_the_wall_clock() -> None:
    scheme = _standard()
    later = NOW + 3 * 86_400
    headers = scheme.sign(scheme.body, [scheme.key], later)
    assert standard.verify(scheme.body, headers, keyed(scheme.key), TOLERANCE, later).event_id
    with pytest.raises(InvalidSignature):
        standard.verify(scheme.body, headers, keyed(scheme.key), TOLERANCE, NOW)


def test_standard_webhook_id_is_part_of_the_signature() -> None:
    scheme = _standard()
    headers = scheme.sign(scheme.body, [scheme.key])
    headers["webhook-id"] = "msg_someone_else"
    with pytest.raises(InvalidSignature):
        scheme.verify(scheme.body, headers)


def test_standard_secret_without_prefix_and_unusable_secrets() -> None:
    scheme = _standard()
    headers = scheme.sign(scheme.body, [scheme.key])
    bare = scheme.key.removeprefix("whsec_")
    _assert_delivered(scheme, scheme.body, headers, (bare,))
    # A secret that is not base64 (or decodes to nothing) is skipped, not an error.
    _assert_delivered(scheme, scheme.body, headers, ("whsec_a", "whsec_", "é", scheme.key))
    with pytest.raises(InvalidSignature):
        scheme.verify(scheme.body, headers, ("whsec_a", "whsec_"))


def test_standard_webhook_id_that_cannot_be_signed() -> None:
    scheme = _standard()
    headers = scheme.sign(scheme.body, [scheme.key])
    headers["webhook-id"] = "msg_\ud800"
    with pytest.raises(InvalidSignature):
        scheme.verify(scheme.body, headers)


def test_standard_ignores_other_signature_versions() -> None:
    scheme = _standard()
    headers = scheme.sign(scheme.body, [scheme.key])
    headers["webhook-signature"] = "v1a,AAAA " + headers["webhook-signature"]
    _assert_delivered(scheme, scheme.body, headers)


@pytest.mark.parametrize("spelling", ["+{ts}", "{head}_{tail}"])
def test_slack_and_paddle_timestamps_are_plain_digits_even_when_signed(spelling: str) -> None:
    # int() accepts these spellings of NOW; a sender signing them is not Slack or Paddle.
    ts = spelling.format(ts=NOW, head=str(NOW)[:5], tail=str(NOW)[5:])
    body = next(scheme for scheme in SCHEMES if scheme.name == "slack").body
    slack_digest = _hmac("k", f"v0:{ts}:".encode() + body).hex()
    slack_headers = Headers(
        {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={slack_digest}"}
    )
    paddle_digest = _hmac("k", f"{ts}:".encode() + body).hex()
    paddle_headers = Headers({"Paddle-Signature": f"ts={ts};h1={paddle_digest}"})
    for module, headers in ((slack, slack_headers), (paddle, paddle_headers)):
        with pytest.raises(InvalidSignature):
            module.verify(body, headers, Source(module.RECORD.name, module.RECORD.name, ("k",)),
                          TOLERANCE, NOW)


# Round trip: the project's sign() produces what its verify() accepts (used by
# `webhooks send`). Correctness of both is pinned by the independent tests above.


@pytest.mark.parametrize("scheme", SCHEMES, ids=_ids(SCHEMES))
def test_sign_round_trip(scheme: Scheme) -> None:
    headers = Headers(scheme.module.sign(scheme.body, scheme.key, NOW))
    delivery = scheme.verify(scheme.body, headers)
    assert delivery.payload == json.loads(scheme.body)
    if scheme.name in BODY_ID_FIELDS:
        assert delivery.event_id == scheme.event_id
    else:
        assert delivery.event_id
        # The same file signed twice is the same event.
        again = Headers(scheme.module.sign(scheme.body, scheme.key, NOW + 1))
        assert scheme.verify(scheme.body, again).event_id == delivery.event_id


@pytest.mark.parametrize("layout", ["{v1}, t={now},t={future}", "{v1},t={now},t={future}",
                                    "{v1}, t={future}"])
def test_stripe_future_timestamp_is_not_sidestepped_by_reordering_the_header(
        layout: str) -> None:
    """Signed over a timestamp an hour ahead, then dressed so that a naive parser finds
    a fresh `t` first: refused (the signed one is outside the tolerance)."""
    from webhooks.shared.providers import stripe as scheme

    now = int(time.time())
    future = now + 3600
    body = b'{"id": "evt_future", "type": "invoice.paid"}'
    signed = scheme.sign(body, "whsec_reorder", future)["Stripe-Signature"]
    v1 = signed.split(",", 1)[1]
    header = layout.format(v1=v1, now=now, future=future)
    with pytest.raises(InvalidSignature):
        scheme.verify(body, {"Stripe-Signature": header}, keyed("whsec_reorder", "stripe"), 300,
                      now)


THIN_KEY = "whsec_thin_destination"


def _thin_source() -> Source:

    return Source("stripe", "thin", (THIN_KEY,), credentials="sk_test_thin",
                  options={"events": EventKind.THIN})


@pytest.mark.parametrize("body", [
    b'{"id": "evt_1", "object": "event", "type": "invoice.paid", "data": {"object": {}}}',
    b'{"id": "evt_1", "object": "v2.core.event"}',
    b'{"id": "evt_1", "object": "v2.core.event", "type": "v1.invoice.paid", "created": "x"}',
    b'{"id": "evt_1", "object": "v2.core.event", "type": "v1.invoice.paid", "created": "x", '
    b'"context": 5, "related_object": {"id": "in_1", "type": "invoice", "url": "/v1/x"}}',
    b'"a string"', b"[1, 2]", b"not json", b"[" * 50_000 + b"]" * 50_000,
    b'{"id": "evt_1", "object": "v2.core.event", "n": 1e5000}',
], ids=["snapshot", "no-type", "no-related", "bad-context", "string", "list", "not-json",
        "deep", "inf"])
def test_a_thin_source_refuses_a_signed_body_that_is_not_a_thin_event_as_bad_payload(
        body: bytes) -> None:
    """Signed with the thin source's own secret, so only the library's thin-event parser
    (or ours, after it) can refuse it: always InvalidPayload (400), never another error."""
    headers = {"Stripe-Signature": f"t={NOW},v1={_hmac(THIN_KEY, f'{NOW}.'.encode() + body).hex()}"}
    with pytest.raises(InvalidPayload):
        stripe.verify(body, headers, _thin_source(), TOLERANCE, NOW)


def test_a_thin_source_verifies_under_each_secret_and_keeps_the_body_as_sent() -> None:
    from dataclasses import replace

    body = (b'{"id": "evt_thin", "object": "v2.core.event", "type": "v1.invoice.paid", '
            b'"livemode": true, "created": "2026-01-01T00:00:00.000Z", "context": "acct_1", '
            b'"related_object": {"id": "in_1", "type": "invoice", "url": "/v1/invoices/in_1"}, '
            b'"amount_decimal": "12.50"}')
    headers = {"Stripe-Signature": f"t={NOW},v1={_hmac(THIN_KEY, f'{NOW}.'.encode() + body).hex()}"}
    rotated = replace(_thin_source(), secrets=("whsec_newer", THIN_KEY),
                      options={"events": EventKind.THIN, "connect": True})
    delivery = stripe.verify(body, headers, rotated, TOLERANCE, NOW)
    assert (delivery.event_id, delivery.event_type, delivery.secret_index) == (
        "evt_thin", "v1.invoice.paid", 1)
    assert (delivery.account, delivery.livemode) == ("acct_1", True)
    assert delivery.payload == json.loads(body)
    # At a source that is not Connect, the context is no account (the payload is kept).
    platform_source = replace(rotated, options={"events": EventKind.THIN})
    platform = stripe.verify(body, headers, platform_source, TOLERANCE, NOW)
    assert (platform.account, platform.payload) == (None, json.loads(body))
    with pytest.raises(InvalidSignature):
        stripe.verify(body, headers, replace(rotated, secrets=("whsec_other",)), TOLERANCE, NOW)
