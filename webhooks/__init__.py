"""webhooks: payment and subscription webhooks applied exactly once under at-least-once
delivery. This module is the public API, everything an app writes against:

    from webhooks import JobContext, handler

    @handler("stripe", "invoice.paid")
    def credit(ctx: JobContext) -> str:
        ctx.fetch(INSERT_ONCE, {...})          # the job's transaction: with its done mark
        ctx.queue_email(key=f"receipt:{...}", kind="receipt", to=..., subject=...,
                        text_body=..., html_body=...)
        return "credited"

An app is a module named in WEBHOOK_HANDLERS (docs/your-app.md): its handlers
(`handler`, `JobContext`, `PermanentJobError`), its hooks (`lock_key` and `LockKey`,
`effects` with `Section`, `Column` and `Event`, `audit_check` with `Finding`) and its
tables (a module-level `MIGRATIONS` folder). Everything else under `webhooks.` is internal:
the processes (`webhooks.ingest`, `webhooks.worker`, `webhooks.clock`, `webhooks.console`),
the core they share (`webhooks.shared`), the command (`webhooks.cli`) and the reference
app (`webhooks.ledger`, built on this API only).
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhooks.shared.errors import PermanentJobError
    from webhooks.shared.handlers import Handler, JobContext, handler
    from webhooks.shared.hooks import (
        Column,
        Event,
        Finding,
        LockKey,
        Section,
        audit_check,
        effects,
        lock_key,
    )

__all__ = ["Column", "Event", "Finding", "Handler", "JobContext", "LockKey",
           "PermanentJobError", "Section", "audit_check", "effects", "handler", "lock_key"]

# Where each name lives. Loaded when first asked for, not when the package is: the
# `webhooks` command imports this package first, and its processes take charge of SIGTERM
# before they load anything heavy (webhooks/starting.py).
_HOMES = {"PermanentJobError": "webhooks.shared.errors",
          **dict.fromkeys(("Handler", "JobContext", "handler"), "webhooks.shared.handlers"),
          **dict.fromkeys(("Column", "Event", "Finding", "LockKey", "Section", "audit_check",
                           "effects", "lock_key"), "webhooks.shared.hooks")}

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'webhooks' has no attribute {name!r}")
        value = getattr(import_module(home), name)
        globals()[name] = value
        return value
