"""The handler registration API.

A handler is a function of one JobContext, registered for a provider and one or more
event types (or "*" for every type of that provider):

    from worker.handlers import JobContext, handler

    @handler("github", "push")
    def count_push(ctx: JobContext) -> None:
        ctx.conn.execute(...)   # the job's own transaction: commit together or not at all
        ctx.fetch(statement, params)  # the same, straight through the driver: cheaper

The context names the event: ctx.provider, ctx.event_id, ctx.event_type, ctx.payload (the
JSON as received), and where it came from: ctx.source (the source that delivered or
reconciled it first: the provider's name for its default source, `connect` for
`/webhooks/stripe/connect`), ctx.account (Stripe: the connected account of a Connect
endpoint's event, None for the platform's own and for other providers) and ctx.livemode
(Stripe: the event's `livemode`; None elsewhere).

It runs inside the job's transaction, on ctx.conn: every write it makes commits together
with the job's `done` mark, or not at all. It must not open its own connection or call
other services; to email, call ctx.queue_email() (an outbox row in the same transaction).
Raise an exception to fail the attempt (retried with backoff up to JOB_MAX_ATTEMPTS),
or PermanentJobError to fail the job at once. Return a short outcome string, or None.

Your handler modules are imported by the workers when named in WEBHOOK_HANDLERS
(comma-separated module paths) or in the `webhooks.handlers` entry-point group.

Beside its handlers an app registers, in the same way, the hooks of shared.hooks
(re-exported here): `lock_key` (the order a batch runs a provider's jobs in, and what
it try-locks), `effects` (what `webhooks show` and the console show of an event) and
`audit_check` (what `webhooks audit` checks). The console and `webhooks show` import the
same modules, so hooks kept in a module of their own that imports only shared/ keep
worker/ out of them (the reference app: webhooks/ledger/hooks.py, and webhooks/ledger/handlers.py).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import TextClause
from sqlalchemy.engine import Connection

from shared import db, hooks, notifications, queries, tracing
from shared.hooks import (
    Column,
    Event,
    Finding,
    LockKey,
    Section,
    audit_check,
    effects,
    lock_key,
)
from shared.settings import Settings

log = logging.getLogger(__name__)

Handler = Callable[["JobContext"], "str | None"]
_registry: dict[tuple[str, str], Handler] = {}
__all__ = ["Column", "Event", "Finding", "JobContext", "LockKey", "Section", "audit_check",
           "effects", "find", "handler", "load", "lock_key", "registered"]


@dataclass
class JobContext:
    conn: Connection
    settings: Settings
    job_id: int
    provider: str
    event_id: str
    event_type: str
    payload: dict[str, Any]
    source: str = ""  # the source's name; "" when built without one: the default source
    account: str | None = None
    livemode: bool | None = None
    emails_queued: int = field(default=0)
    # What the handler reported with notify(), recorded with the job's done mark.
    notifications: list[notifications.Occurrence] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.source = self.source or self.provider

    def fetch(self, statement: TextClause, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """Run a text() statement in the job's transaction and return its first row (a
        tuple) or None: ctx.conn.execute(statement, params).first() for less CPU (it goes
        straight through the driver), for handlers on a hot path."""
        return db.fetch_in(self.conn, statement, params)

    def queue_email(
        self, *, key: str, kind: str, to: str, subject: str, text_body: str, html_body: str
    ) -> bool:
        """Queue one email, sent once per key by the outbox. False if the key exists."""
        row = self.fetch(
            queries.OutboxInsert,
            {"key": key, "kind": kind, "to_address": to, "subject": subject,
             "text_body": text_body, "html_body": html_body, "provider": self.provider,
             "event_id": self.event_id, "trace_context": tracing.traceparent()},
        )
        if row is not None:
            self.emails_queued += 1
        return row is not None


    def notify(self, kind: str, *, count: int = 1, error: str | None = None,
               **details: Any) -> None:
        """Record a notification of `kind` (one of shared.models.NotificationKind) for
        this event's source, in the job's transaction: it commits with the job's done
        mark, or not at all. `details` (JSON values) go into the message."""
        self.notifications.append(notifications.Occurrence(
            notifications.Kind(kind), self.provider, self.source, count=count,
            samples=[self.event_id], error=error, extra=details))


def handler(provider: str, *event_types: str) -> Callable[[Handler], Handler]:
    """Register the decorated function for provider and each of event_types."""
    if not event_types:
        raise TypeError("handler() needs at least one event type (or '*')")

    def register(function: Handler) -> Handler:
        for event_type in event_types:
            existing = _registry.get((provider, event_type))
            if existing is not None and existing is not function:
                raise ValueError(f"a handler for {provider} {event_type} is already registered")
            _registry[(provider, event_type)] = function
        return function

    return register


def find(provider: str, event_type: str) -> Handler | None:
    return _registry.get((provider, event_type)) or _registry.get((provider, "*"))


def registered(provider: str, event_type: str) -> bool:
    """Whether a handler names this very type (not through "*")."""
    return (provider, event_type) in _registry


def load(settings: Settings) -> None:
    """Import the built-in handlers and hooks, WEBHOOK_HANDLERS modules and entry points."""
    for module in hooks.BUILTIN_HANDLER_MODULES:
        importlib.import_module(module)
    hooks.load(settings.handler_modules)
    log.debug("handlers loaded: %d", len(_registry))
