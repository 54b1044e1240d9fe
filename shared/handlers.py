"""The handler registration API: a handler is a function of one JobContext, registered for
a provider and one or more event types (or "*" for every type of that provider):

    from webhooks import JobContext, handler

    @handler("github", "push")
    def count_push(ctx: JobContext) -> None:
        ctx.conn.execute(...)   # the job's own transaction: commit together or not at all
        ctx.fetch(statement, params)  # the same, straight through the driver: cheaper

It runs inside the job's transaction, on ctx.conn: every write it makes commits together
with the job's `done` mark, or not at all. It must not open its own connection or call
other services; to email, call ctx.queue_email() (an outbox row in the same transaction).
Raise an exception to fail the attempt (retried with backoff up to JOB_MAX_ATTEMPTS), or
PermanentJobError to fail the job at once. Return a short outcome string, or None.

A handler belongs to the app whose module registered it (shared/hooks.py): it runs where
that app runs. Several apps may handle one event type: each one's handler runs in the
job's transaction, in the apps' order, and the job's outcome names each (worker/jobs.py).
Within one module, one type has one handler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import TextClause
from sqlalchemy.engine import Connection

from webhooks.shared import calls, db, hooks, notifications, queries, tracing
from webhooks.shared.settings import Settings

log = logging.getLogger(__name__)

Handler = Callable[["JobContext"], "str | None"]
_registry: dict[tuple[str, str], list[Handler]] = {}
ANY_TYPE = "*"


@dataclass
class JobContext:
    """What a handler is given: the job's transaction and the event it applies."""

    conn: Connection
    """The job's transaction: every write commits with the job's `done` mark, or not at all.
    Never commit or roll it back yourself."""
    settings: Settings
    """The process's settings (shared/settings.py)."""
    job_id: int
    """The job's id (`webhooks show`, the console)."""
    provider: str
    """`stripe`, `paddle`, `shopify`, `github`, `slack` or `standard`."""
    event_id: str
    """The provider's event id (GitHub's and Shopify's delivery id header)."""
    event_type: str
    """The provider's event type (`invoice.paid`, GitHub's `X-GitHub-Event`, ...)."""
    payload: dict[str, Any]
    """The event's JSON as received (a Stripe thin event's: the fetched event, shaped as a
    snapshot event, shared/providers/stripe_thin.py)."""
    source: str = ""
    """The source that delivered or reconciled it first: the provider's name for its default
    source, `connect` for `/webhooks/stripe/connect` ("" when built without one: the
    provider's)."""
    account: str | None = None
    """Stripe: the connected account of a Connect endpoint's event; None elsewhere."""
    livemode: bool | None = None
    """Stripe: the event's `livemode`; None elsewhere."""
    emails_queued: int = field(default=0)
    """How many emails this handler queued (queue_email returned True)."""
    calls_queued: int = field(default=0)
    """How many calls this handler queued (queue_call returned True)."""
    notifications: list[notifications.Occurrence] = field(default_factory=list)
    """What the handler reported with notify(), recorded with the job's done mark."""

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
        """Queue one email in the job's transaction; the outbox sends it through Postmark
        once per `key` after the job commits. False if the key exists (queued before, by
        this event or another: an idempotency key names the business fact, such as
        `receipt:<invoice id>`). `kind`: a short label for the console and metrics
        (`receipt`); `to`: the recipient's address; `subject`, `text_body` and `html_body`:
        the email as sent."""
        row = self.fetch(
            queries.OutboxInsert,
            {"key": key, "kind": kind, "to_address": to, "subject": subject,
             "text_body": text_body, "html_body": html_body, "provider": self.provider,
             "event_id": self.event_id, "trace_context": tracing.traceparent()},
        )
        if row is not None:
            self.emails_queued += 1
        return row is not None

    def queue_call(self, *, key: str, target: str, method: str, path: str,
                   params: dict[str, Any] | None = None) -> bool:
        """Queue one call to another API in the job's transaction; the dispatcher makes it
        once per `key` after the job commits, with `key` as the target's idempotency key
        (docs/calls.md). False if the key exists. `target`: `stripe` (the stripe library,
        with the API key of this event's source, and `Stripe-Account` for a connected
        account's event) or a name N of CALL_<N>_URL; `method` and `path` (`POST`,
        `/v1/refunds`) and `params` (form parameters for Stripe, the JSON body elsewhere)."""
        queued = calls.queue(self.conn, key=key, target=target, method=method, path=path,
                             params=params or {}, provider=self.provider,
                             event_id=self.event_id, source=self.source,
                             account=self.account, targets=self.settings.call_targets)
        self.calls_queued += queued
        return queued

    def call_result(self, key: str) -> dict[str, Any] | None:
        """A sent call's answer, `{"status": 200, "body": {...}}`; None until it is sent.
        A call an operator settled as sent (`webhooks calls settle --sent`) has no answer
        recorded: `{"status": None, "body": None}`."""
        return calls.result(self.conn, key)

    def notify(self, kind: str, *, count: int = 1, error: str | None = None,
               **details: Any) -> None:
        """Record a notification of `kind` (one of shared.models.NotificationKind) for
        this event's source, in the job's transaction: it commits with the job's done
        mark, or not at all. `details` (JSON values) go into the message."""
        self.notifications.append(notifications.Occurrence(
            notifications.Kind(kind), self.provider, self.source, count=count,
            samples=[self.event_id], error=error, extra=details))


def handler(provider: str, *event_types: str) -> Callable[[Handler], Handler]:
    """Register the decorated function for provider and each of event_types ("*": every
    type of that provider that its app has no handler of its own for)."""
    if not event_types:
        raise TypeError("handler() needs at least one event type (or '*')")

    def register(function: Handler) -> Handler:
        for event_type in event_types:
            registered_ = _registry.setdefault((provider, event_type), [])
            if any(other.__module__ == function.__module__ and other is not function
                   for other in registered_):
                raise ValueError(f"a handler for {provider} {event_type} is already "
                                 f"registered in {function.__module__}")
            if function not in registered_:
                registered_.append(function)
        return function

    return register


def for_event(provider: str, event_type: str) -> list[tuple[str, Handler]]:
    """(app, handler) of each running app that handles this type, in the apps' order: its
    handler of this very type, else its "*" handler."""
    exact = hooks.ranked(_registry.get((provider, event_type), ()))
    apps = {app for app, _ in exact}
    wildcard = [function for app, function in hooks.ranked(_registry.get((provider, ANY_TYPE), ()))
                if app not in apps]
    return list(hooks.ranked([*(function for _, function in exact), *wildcard]))


def load(settings: Settings) -> tuple[str, ...]:
    """Import the apps the settings name and run them (shared.hooks.load)."""
    return hooks.load(settings.handler_modules)


def registered(provider: str, event_type: str) -> bool:
    """Whether a running app's handler names this very type (not through "*")."""
    return bool(hooks.ranked(_registry.get((provider, event_type), ())))
