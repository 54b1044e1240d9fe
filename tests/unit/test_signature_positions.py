"""Which configured secret verified a delivery (Delivery.secret_index), for every provider:
what lets a secret rotation be watched and finished (`webhooks_signature_verified_total`)."""

from __future__ import annotations

import base64
import json
import time

import pytest

from webhooks.shared.errors import InvalidSignature
from webhooks.shared.providers import PROVIDERS, paddle, standard, stripe
from webhooks.shared.providers.base import Provider
from webhooks.shared.sources import Source

TOLERANCE = 300
BODIES = {
    "stripe": {"id": "evt_rotation", "type": "invoice.paid"},
    "paddle": {"event_id": "evt_rotation", "event_type": "transaction.completed"},
    "shopify": {"id": 1},
    "github": {"zen": "rotation"},
    "slack": {"event_id": "Ev_rotation", "event": {"type": "app_mention"}},
    "standard": {"type": "user.created"},
}


def _secret(provider: str, name: str) -> str:
    if provider == "standard":
        return "whsec_" + base64.b64encode(name.encode() * 4).decode()
    return f"{provider}_{name}_secret"


NEW, OLD, OTHER = "new", "old", "other"


def _verify(module: Provider, configured: tuple[str, ...], signed_with: str) -> int:
    body = json.dumps(BODIES[module.name]).encode()
    now = time.time()
    headers = module.sign(body, _secret(module.name, signed_with), now)
    secrets = tuple(_secret(module.name, name) for name in configured)
    source = Source(module.name, module.name, secrets)
    index: int = module.verify(body, headers, source, TOLERANCE, now).secret_index
    return index


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_the_position_of_the_secret_that_verified(provider: str) -> None:
    module = PROVIDERS[provider]
    assert _verify(module, (NEW,), NEW) == 0
    assert _verify(module, (NEW, OLD), NEW) == 0
    assert _verify(module, (NEW, OLD), OLD) == 1
    assert _verify(module, (OLD, NEW), NEW) == 1
    assert _verify(module, (OTHER, OLD, NEW), NEW) == 2
    with pytest.raises(InvalidSignature):
        _verify(module, (NEW, OLD), OTHER)


def test_slack_url_verification_carries_the_position() -> None:
    module = PROVIDERS["slack"]
    body = json.dumps({"type": "url_verification", "challenge": "c"}).encode()
    now = time.time()
    headers = module.sign(body, _secret("slack", OLD), now)
    secrets = (_secret("slack", NEW), _secret("slack", OLD))
    delivery = module.verify(body, headers, Source("slack", "slack", secrets), TOLERANCE, now)
    assert delivery.reply == {"challenge": "c"} and delivery.secret_index == 1


def _signed_by_both(module: Provider, body: bytes, now: float) -> dict[str, str]:
    """One request carrying a signature under each of two secrets, in the order OLD, NEW
    (what the provider sends while its own rotation overlaps)."""
    old = module.sign(body, _secret(module.name, OLD), now)
    new = module.sign(body, _secret(module.name, NEW), now)
    if module is stripe.RECORD:
        return {"Stripe-Signature": old["Stripe-Signature"] + ","
                + new["Stripe-Signature"].split(",", 1)[1]}
    if module is paddle.RECORD:
        return {"Paddle-Signature": old["Paddle-Signature"] + ";"
                + new["Paddle-Signature"].split(";", 1)[1]}
    return {**new, "webhook-signature": old["webhook-signature"] + " "
            + new["webhook-signature"]}


@pytest.mark.parametrize("module", [stripe.RECORD, paddle.RECORD, standard.RECORD],
                         ids=lambda m: m.name)
def test_several_signatures_count_the_first_configured_secret(module: Provider) -> None:
    body = json.dumps(BODIES[module.name]).encode()
    now = time.time()
    headers = _signed_by_both(module, body, now)
    for configured, expected in (((NEW, OLD), 0), ((OLD, NEW), 0), ((OTHER, NEW), 1)):
        secrets = tuple(_secret(module.name, name) for name in configured)
        source = Source(module.name, module.name, secrets)
        assert module.verify(body, headers, source, TOLERANCE, now).secret_index == expected


def test_a_standard_secret_that_cannot_sign_keeps_its_position() -> None:
    body = json.dumps(BODIES["standard"]).encode()
    now = time.time()
    headers = standard.sign(body, _secret("standard", NEW), now)
    secrets = ("whsec_***not base64***", _secret("standard", NEW))
    assert standard.verify(body, headers, Source("standard", "standard", secrets), TOLERANCE,
                           now).secret_index == 1
