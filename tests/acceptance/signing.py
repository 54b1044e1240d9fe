"""Provider signatures, written out from each provider's documentation, independently of
the code under test (shared/providers), so a shared mistake cannot make both agree.

Light on purpose (standard library only): sender processes import it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

PROVIDERS = ("stripe", "paddle", "shopify", "github", "slack", "standard")

SECRETS = {
    "stripe": "whsec_acceptance_stripe",
    "paddle": "pdl_ntfset_acceptance_paddle",
    "shopify": "shpss_acceptance_shopify",
    "github": "acceptance-github",
    "slack": "acceptance-slack-signing",
    "standard": "whsec_" + base64.b64encode(b"acceptance standard webhooks key").decode(),
}
# The documented variable names (the README's tables), written out rather than imported
# from webhooks.shared.settings, so a renamed variable there fails this suite instead of
# following it.
SECRET_VARIABLES = {
    "stripe": "STRIPE_WEBHOOK_SECRET",
    "paddle": "PADDLE_WEBHOOK_SECRET",
    "shopify": "SHOPIFY_WEBHOOK_SECRET",
    "github": "GITHUB_WEBHOOK_SECRET",
    "slack": "SLACK_SIGNING_SECRET",
    "standard": "STANDARD_WEBHOOK_SECRET",
}
# Providers whose event id (and type) travel in headers rather than in the body.
HEADER_IDS = {
    "shopify": ("X-Shopify-Webhook-Id", "X-Shopify-Topic"),
    "github": ("X-GitHub-Delivery", "X-GitHub-Event"),
    "standard": ("webhook-id", None),
}


def _hmac(key: bytes | str, message: bytes) -> bytes:
    raw = key.encode() if isinstance(key, str) else key
    return hmac.new(raw, message, hashlib.sha256).digest()


def signature_headers(provider: str, body: bytes, secret: str, *, event_id: str = "",
                      timestamp: int | None = None) -> dict[str, str]:
    """The signature headers a provider sends with body (event_id: for the schemes that
    sign it, Standard Webhooks)."""
    ts = int(time.time()) if timestamp is None else timestamp
    if provider == "stripe":
        return {"Stripe-Signature": f"t={ts},v1={_hmac(secret, f'{ts}.'.encode() + body).hex()}"}
    if provider == "paddle":
        return {"Paddle-Signature": f"ts={ts};h1={_hmac(secret, f'{ts}:'.encode() + body).hex()}"}
    if provider == "shopify":
        return {"X-Shopify-Hmac-Sha256": base64.b64encode(_hmac(secret, body)).decode()}
    if provider == "github":
        return {"X-Hub-Signature-256": "sha256=" + _hmac(secret, body).hex()}
    if provider == "slack":
        mac = _hmac(secret, f"v0:{ts}:".encode() + body).hex()
        return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": f"v0={mac}"}
    if provider == "standard":
        key = base64.b64decode(secret.removeprefix("whsec_"))
        mac = base64.b64encode(_hmac(key, f"{event_id}.{ts}.".encode() + body)).decode()
        return {"webhook-id": event_id, "webhook-timestamp": str(ts),
                "webhook-signature": f"v1,{mac}"}
    raise ValueError(f"unknown provider {provider!r}")


def delivery_headers(provider: str, body: bytes, event_id: str, event_type: str,
                     secret: str | None = None, timestamp: int | None = None) -> dict[str, str]:
    """Everything a provider sends with one delivery of an event: signature, and the
    event id and type headers where the provider carries them there."""
    headers = {"Content-Type": "application/json"}
    ids = HEADER_IDS.get(provider)
    if ids is not None:
        headers[ids[0]] = event_id
        if ids[1] is not None:
            headers[ids[1]] = event_type
    headers.update(signature_headers(provider, body, secret or SECRETS[provider],
                                     event_id=event_id, timestamp=timestamp))
    return headers
