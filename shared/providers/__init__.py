"""One module per provider's signature scheme, behind the interface in base.py.

To add a provider: write a module with `name`, `verify()` and `sign()`, add it to
PROVIDERS below, and give it a secret variable in shared/settings.py.
"""

from __future__ import annotations

from types import ModuleType

from shared.providers import github, paddle, shopify, slack, standard, stripe

PROVIDERS: dict[str, ModuleType] = {
    module.name: module for module in (stripe, paddle, shopify, github, slack, standard)
}


def get(name: str) -> ModuleType | None:
    return PROVIDERS.get(name)


def signs_event_id(name: str) -> bool:
    """Whether the provider's signature covers the event id (GitHub's and Shopify's do
    not: their ids are headers outside it)."""
    return bool(getattr(PROVIDERS.get(name), "SIGNED_EVENT_ID", True))
