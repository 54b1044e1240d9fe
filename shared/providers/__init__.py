"""The providers: one record each, the module of its signature scheme (the interface is
base.Provider). Settings, `webhooks dev`, the command's choices, the metrics' labels and
the README's table all read PROVIDERS; none keeps a list of its own.

To add a provider: write a module with the attributes of base.Provider and add it below.
"""

from __future__ import annotations

from webhooks.shared.providers import github, paddle, shopify, slack, standard, stripe
from webhooks.shared.providers.base import Provider, SecretFormat

_RECORDS: tuple[Provider, ...] = (stripe, paddle, shopify, github, slack, standard)
PROVIDERS: dict[str, Provider] = {record.name: record for record in _RECORDS}
NAMES: tuple[str, ...] = tuple(PROVIDERS)
RECONCILED: tuple[str, ...] = tuple(record.name for record in _RECORDS if record.RECONCILES)


def get(name: str) -> Provider | None:
    return PROVIDERS.get(name)


def signs_event_id(name: str) -> bool:
    """Whether the provider's signature covers the event id (GitHub's and Shopify's do
    not: their ids are headers outside it). An unknown provider: True."""
    record = PROVIDERS.get(name)
    return record is None or record.SIGNED_EVENT_ID


def markdown_table() -> str:
    """The README's table of providers."""
    rows = ["| provider | endpoint | secret variable | headers it needs | event id | event type |",
            "| --- | --- | --- | --- | --- | --- |"]
    for record in _RECORDS:
        secret = f"`{record.SECRET_VARIABLE}`"
        if record.SECRET_FORMAT is not SecretFormat.HEX:
            secret += " (`whsec_...`)"
        rows.append(f"| {record.TITLE} | `/webhooks/{record.name}` | {secret} | "
                    f"{record.HEADERS} | {record.EVENT_ID} | {record.EVENT_TYPE} |")
    return "\n".join(rows)
