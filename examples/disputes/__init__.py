"""The disputes app: an app that acts outside the database, built on the public API
(`webhooks`) and SQLAlchemy only (docs/calls.md walks through it).

On a Stripe dispute it records the dispute once, in a table of its own (`disputes`), and,
while Stripe says the disputed charge can still be refunded (`is_charge_refundable`: an
inquiry, before it becomes a chargeback), queues one refund of the disputed amount through
`ctx.queue_call`: one per charge, whichever of the dispute's events comes first and
however often. The worker's call dispatch makes it once, with the call's key as Stripe's
Idempotency-Key. `charge.dispute.closed` sets the dispute's final status. It runs where
WEBHOOK_HANDLERS names it (`examples.disputes`), alone or beside other apps; it has no
lock key (a dispute names no customer). Importing it registers:

- `examples.disputes.handlers`: the handlers, with the SQL that makes them idempotent;
- `examples.disputes.tables`: its table, on a MetaData of its own (METADATA below), and
  `migrations/` (MIGRATIONS below): its migration history, applied by `webhooks migrate`
  after the core's, in the version table alembic_version_examples_disputes.

Its calls go to Stripe with the API key of the event's source (`STRIPE_API_KEY` for the
default one), which must be allowed to create refunds.
"""

from pathlib import Path

from . import handlers, tables  # noqa: F401  (importing them registers them)

# The app's Alembic revision scripts: `webhooks migrate` runs them after the core's.
MIGRATIONS = Path(__file__).parent / "migrations"
# Its tables: `webhooks migrate --check` compares them with the database.
METADATA = tables.metadata
