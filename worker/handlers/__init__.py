"""The handler API, for the worker: shared/handlers.py (registration, JobContext) and
shared/hooks.py (the apps that run)."""

from __future__ import annotations

from shared import hooks
from shared.handlers import ANY_TYPE, Handler, JobContext, _registry, for_event, handler, registered
from shared.hooks import Column, Event, Finding, LockKey, Section, audit_check, effects, lock_key
from shared.settings import Settings

__all__ = ["ANY_TYPE", "Column", "Event", "Finding", "Handler", "JobContext", "LockKey",
           "Section", "_registry", "audit_check", "effects", "for_event", "handler", "load",
           "lock_key", "registered"]


def load(settings: Settings) -> tuple[str, ...]:
    """Import the apps the settings name and run them (shared.hooks.load)."""
    return hooks.load(settings.handler_modules)
