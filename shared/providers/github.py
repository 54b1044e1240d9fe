"""GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`.

No timestamp is signed, and neither is the event id, `X-GitHub-Delivery` (which GitHub
keeps when a delivery is redelivered), nor the type: a captured delivery re-sent with a new
id is caught by its body under its type instead (the record's `signed_event_id=False`,
shared/recording.py). The legacy SHA-1 `X-Hub-Signature` is ignored.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import TYPE_CHECKING

from webhooks.shared import variables as v
from webhooks.shared.providers.base import (
    Delivery,
    Headers,
    HmacScheme,
    Option,
    Provider,
    SecretFormat,
    Source,
    header,
    hex_digest,
    optional_type,
    parse_object,
    require_id,
)

if TYPE_CHECKING:
    from webhooks.shared.providers.events_api import EventsAPI

SIGNATURE = HmacScheme("X-Hub-Signature-256", hex_digest, prefix="sha256=")


def verify(
    body: bytes, headers: Headers, source: Source, tolerance: int, now: float
) -> Delivery:
    index = SIGNATURE.verify(source.secrets, body, [header(headers, SIGNATURE.header).strip()])
    payload = parse_object(body)
    return Delivery(
        event_id=require_id(headers.get("X-GitHub-Delivery"), "X-GitHub-Delivery"),
        event_type=optional_type(headers.get("X-GitHub-Event")),
        payload=payload,
        secret_index=index,
    )


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    # The id is derived from the body, so sending one file twice is a duplicate, as it is
    # for the providers whose event id is inside the body.
    delivery = str(uuid.UUID(bytes=hashlib.sha256(body).digest()[:16]))
    return {SIGNATURE.header: SIGNATURE.sign(secret, body), "X-GitHub-Delivery": delivery}


def sign_as(body: bytes, secret: str, now: float, event_id: str,
            event_type: str) -> dict[str, str]:
    return {**sign(body, secret, now), "X-GitHub-Delivery": event_id,
            "X-GitHub-Event": event_type}


# A hook's API path: repos/OWNER/REPO/hooks/ID or orgs/ORG/hooks/ID.
HOOK = r"(repos/[\w.-]+/[\w.-]+|orgs/[\w.-]+)/hooks/\d+"
HOOK_WHAT = "repos/OWNER/REPO/hooks/ID or orgs/ORG/hooks/ID"

# A GitHub source's token and hooks for its events API (GITHUB_<NAME>_TOKEN and
# GITHUB_<NAME>_HOOKS; the default source's GITHUB_TOKEN and GITHUB_HOOKS).
TOKEN = Option("token", "TOKEN", v.text, None, "a named GitHub source's token",
               "unset: not reconciled", default_doc="a token that reads hook deliveries",
               topic=v.Topic.RECONCILIATION)
HOOKS = Option("hooks", "HOOKS", v.pattern(HOOK, HOOK_WHAT), (), "the hooks a named GitHub "
               "source reconciles, as `GITHUB_HOOKS`", "none",
               default_doc="the hooks to reconcile, e.g. "
               "`repos/acme/shop/hooks/12,orgs/acme/hooks/34`", topic=v.Topic.RECONCILIATION,
               default_shown="none")


def events_api(source: Source, api_base: str) -> EventsAPI:
    """Each hook's `GET /<hook>/deliveries` with the source's token
    (shared/providers/github_events.py)."""
    from webhooks.shared.providers import github_events

    return github_events.GitHubDeliveries(source.credentials or "", api_base, HOOKS.of(source))


RECORD = Provider(
    name="github", title="GitHub",
    secret_variable="GITHUB_WEBHOOK_SECRET",  # noqa: S106 - the name of the variable
    secret_format=SecretFormat.HEX, verify=verify, sign=sign,
    # The id and type headers are outside the signature: a body already recorded is a
    # duplicate.
    signed_event_id=False,
    headers="`X-Hub-Signature-256`, `X-GitHub-Delivery`, `X-GitHub-Event`",
    event_id="header `X-GitHub-Delivery`", event_type="header `X-GitHub-Event`",
    credentials=TOKEN, options=(HOOKS,), api_base="https://api.github.com",
    events_api=events_api, events_api_needs=(TOKEN, HOOKS), sign_as=sign_as,
)
