"""The standard provider reads Svix's header names (svix-id, svix-timestamp, svix-signature)
as well as the Standard Webhooks ones, one family at a time, webhook-* first.

Signatures are made by the `svix` and `standardwebhooks` libraries, not by our sign().
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook as StandardWebhook
from svix.webhooks import Webhook as SvixWebhook
from werkzeug.datastructures import Headers

from webhooks.shared.errors import InvalidPayload, InvalidSignature
from webhooks.shared.providers import standard
from webhooks.shared.sources import Source

NOW = 1_760_000_000
TOLERANCE = 300
SECRET = "whsec_" + base64.b64encode(b"svix-family-test-key-0123456789ab").decode()
BODY = json.dumps({"type": "user.created", "data": {"id": "user_2abc"}}).encode()


def _signature(message_id: str, ts: int = NOW, secret: str = SECRET) -> str:
    signed_at = datetime.fromtimestamp(ts, tz=UTC)
    return SvixWebhook(secret).sign(message_id, signed_at, BODY.decode())


def _svix(message_id: str = "msg_svix", ts: int = NOW, secret: str = SECRET) -> dict[str, str]:
    return {
        "svix-id": message_id,
        "svix-timestamp": str(ts),
        "svix-signature": _signature(message_id, ts, secret),
    }


def _webhook(message_id: str = "msg_std", ts: int = NOW, secret: str = SECRET) -> dict[str, str]:
    signed_at = datetime.fromtimestamp(ts, tz=UTC)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(ts),
        "webhook-signature": StandardWebhook(secret).sign(message_id, signed_at, BODY.decode()),
    }


def _verify(headers: dict[str, str], now: int = NOW):
    return standard.verify(BODY, Headers(headers), Source("standard", "standard", (SECRET,)),
                           TOLERANCE, now)


def test_svix_family_alone() -> None:
    delivery = _verify(_svix("msg_2KWPBgLlAfxdpx2AI54pPJ85f1W"))
    assert (delivery.event_id, delivery.event_type) == (
        "msg_2KWPBgLlAfxdpx2AI54pPJ85f1W",
        "user.created",
    )


def test_webhook_family_alone_is_unchanged() -> None:
    assert _verify(_webhook("msg_std")).event_id == "msg_std"


def test_both_families_valid_the_webhook_id_is_the_event_id() -> None:
    # Svix may send both; with the same message both ids agree, but webhook-* is what is read.
    assert _verify({**_svix("msg_svix"), **_webhook("msg_std")}).event_id == "msg_std"


def test_both_families_a_valid_svix_set_does_not_rescue_a_bad_webhook_set() -> None:
    headers = {**_svix("msg_svix"), **_webhook("msg_std", secret=_other_secret())}
    with pytest.raises(InvalidSignature, match="webhook-signature"):
        _verify(headers)


def test_both_families_a_bad_svix_set_does_not_spoil_a_valid_webhook_set() -> None:
    headers = {**_svix("msg_svix", secret=_other_secret()), **_webhook("msg_std")}
    assert _verify(headers).event_id == "msg_std"


@pytest.mark.parametrize("webhook_header", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_families_are_never_mixed(webhook_header: str) -> None:
    # One webhook-* header selects that family: the svix-* ones do not fill in its gaps.
    svix = _svix("msg_same")
    suffix = webhook_header.removeprefix("webhook-")
    headers = {key: value for key, value in svix.items() if key != f"svix-{suffix}"}
    headers[webhook_header] = svix[f"svix-{suffix}"]
    with pytest.raises(InvalidSignature, match="missing webhook-"):
        _verify(headers)


@pytest.mark.parametrize("missing", ["svix-id", "svix-timestamp", "svix-signature"])
def test_svix_family_missing_one_header(missing: str) -> None:
    headers = _svix()
    del headers[missing]
    with pytest.raises(InvalidSignature, match=f"missing {missing} header"):
        _verify(headers)


def test_no_family_at_all() -> None:
    with pytest.raises(InvalidSignature, match="missing webhook-id header"):
        _verify({"content-type": "application/json"})


def test_svix_family_keeps_the_timestamp_checks() -> None:
    with pytest.raises(InvalidSignature):
        _verify(_svix(ts=NOW - TOLERANCE - 1))
    with pytest.raises(InvalidSignature):
        _verify(_svix(ts=NOW + TOLERANCE + 1))
    headers = _svix()
    headers["svix-timestamp"] = f"+{NOW}"
    with pytest.raises(InvalidSignature, match="svix-timestamp is not a number"):
        _verify(headers)


def test_svix_id_is_signed() -> None:
    headers = _svix("msg_original")
    headers["svix-id"] = "msg_someone_else"
    with pytest.raises(InvalidSignature, match="no svix-signature matches"):
        _verify(headers)


def test_svix_signature_without_v1() -> None:
    headers = _svix()
    headers["svix-signature"] = "v1a,AAAA"
    with pytest.raises(InvalidSignature, match="svix-signature has no v1 signature"):
        _verify(headers)


def test_svix_id_that_is_not_a_usable_event_id() -> None:
    headers = _svix("x" * 256)
    with pytest.raises(InvalidPayload, match="svix-id"):
        _verify(headers)


def _other_secret() -> str:
    return "whsec_" + base64.b64encode(b"another-endpoint-key-0123456789").decode()
