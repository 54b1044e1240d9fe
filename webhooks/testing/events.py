"""The events `webhooks check-handlers` applies: read from files as a team has them, a
Stripe event as its API or the Dashboard shows it, a JSON array of them, or JSON lines as
`webhooks events --json --payload` prints recorded traffic (each line its provider, id,
type and payload)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhooks.shared.providers import PROVIDERS


class UnreadableEvents(ValueError):
    """A file that is not events: the message names the file and what is wrong."""


@dataclass(frozen=True)
class Event:
    """One event to deliver: its provider, id, type and payload (the body as sent)."""

    provider: str
    event_id: str
    event_type: str
    payload: Mapping[str, Any]

    def body(self) -> bytes:
        return json.dumps(self.payload, separators=(",", ":")).encode()

    def __str__(self) -> str:
        return f"{self.event_id} ({self.event_type})"


def event(payload: Mapping[str, Any], provider: str = "stripe", *, event_id: str | None = None,
          event_type: str | None = None) -> Event:
    """An event from its payload: the id and type where the providers that carry them in
    the body put them (`id`/`event_id`, `type`/`event_type`), unless given."""
    found_id = event_id or payload.get("id") or payload.get("event_id")
    found_type = event_type or payload.get("type") or payload.get("event_type")
    if not isinstance(found_id, str) or not isinstance(found_type, str):
        raise UnreadableEvents("an event without an id and a type (give them, or use the "
                               "lines of `webhooks events --json --payload`)")
    return Event(provider, found_id, found_type, payload)


def read_events(paths: Iterable[str | Path], provider: str = "stripe") -> list[Event]:
    """The events of each file, in order: a JSON object (one event), an array of them, or
    JSON lines; a line of `webhooks events --json --payload` names its own provider, id
    and type."""
    found: list[Event] = []
    for path in paths:
        found.extend(_read(Path(path), provider))
    if not found:
        raise UnreadableEvents("no events in the files given")
    return found


def _read(path: Path, provider: str) -> list[Event]:
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    try:
        if isinstance(whole, dict):
            return [_one(whole, provider)]
        if isinstance(whole, list):
            return [_one(item, provider) for item in whole]
        return [_one(json.loads(line), provider) for line in text.splitlines() if line.strip()]
    except (ValueError, TypeError, AttributeError) as error:
        raise UnreadableEvents(f"{path}: {error}") from None


def _one(item: Any, provider: str) -> Event:
    if not isinstance(item, dict):
        raise UnreadableEvents("an event is not a JSON object")
    if "payload" in item and "event_id" in item and isinstance(item["payload"], dict):
        own = item.get("provider") or provider  # a line of `webhooks events --payload`
        if own not in PROVIDERS:
            raise UnreadableEvents(f"unknown provider {own!r}")
        return event(item["payload"], own, event_id=item["event_id"],
                     event_type=item.get("event_type"))
    return event(item, provider)
