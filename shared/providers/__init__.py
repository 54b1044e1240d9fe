"""The providers: one record each (base.Provider), declared by the module of its signature
scheme as `RECORD`. Settings, the sources' variables, `webhooks dev`, the command's
choices, the metrics' labels, reconciliation, the step before a handler and the README's
tables all read PROVIDERS; none keeps a list of its own, and none branches on a name.

To add a provider: write a module that declares its RECORD and add it below
(CONTRIBUTING.md, "Adding a provider").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from webhooks.shared.providers import github, paddle, shopify, slack, standard, stripe
from webhooks.shared.providers.base import Provider, SecretFormat

_RECORDS: tuple[Provider, ...] = (
    stripe.RECORD, paddle.RECORD, shopify.RECORD, github.RECORD, slack.RECORD, standard.RECORD)
PROVIDERS: dict[str, Provider] = {record.name: record for record in _RECORDS}


def get(name: str) -> Provider | None:
    return PROVIDERS.get(name)


def names() -> tuple[str, ...]:
    return tuple(PROVIDERS)


def reconciled() -> tuple[str, ...]:
    """The providers with an events API (reconciliation)."""
    return tuple(name for name, record in PROVIDERS.items() if record.reconciles)


def signs_event_id(name: str) -> bool:
    """Whether the provider's signature covers the event id (GitHub's and Shopify's do
    not: their ids are headers outside it). An unknown provider: True."""
    record = PROVIDERS.get(name)
    return record is None or record.signed_event_id


@contextmanager
def registered(record: Provider) -> Iterator[Provider]:
    """The provider added to PROVIDERS for the block (a provider a test defines); the
    settings read after it see its variables."""
    if record.name in PROVIDERS:
        raise ValueError(f"provider {record.name!r} is already registered")
    PROVIDERS[record.name] = record
    try:
        yield record
    finally:
        del PROVIDERS[record.name]


def markdown_table() -> str:
    """The README's table of providers."""
    rows = ["| provider | endpoint | secret variable | headers it needs | event id | event type |",
            "| --- | --- | --- | --- | --- | --- |"]
    for record in PROVIDERS.values():
        secret = f"`{record.secret_variable}`"
        if record.secret_format is not SecretFormat.HEX:
            secret += " (`whsec_...`)"
        rows.append(f"| {record.title} | `/webhooks/{record.name}` | {secret} | "
                    f"{record.headers} | {record.event_id} | {record.event_type} |")
    return "\n".join(rows)
