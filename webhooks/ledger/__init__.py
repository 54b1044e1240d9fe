"""The reference Stripe app: a ledger of accounts per (customer, currency), credited by paid
invoices and debited by refunds, and the subscriptions' statuses; receipts and
payment-failed emails through the outbox. An app like yours, built on the public API only,
and run only where WEBHOOK_HANDLERS (or an entry point) names it, as `webhooks.ledger`
(`webhooks dev` names it unless the variable is set). Importing it registers:

- `webhooks.ledger.hooks`: its lock key, its effects (`webhooks show`, the console) and its
  audit checks;
- `webhooks.ledger.handlers`: its handlers, with the SQL that carries its guarantees;
- `webhooks.ledger.tables`: its tables, on a MetaData of its own, and
  `webhooks.ledger.migrations` (`MIGRATIONS` below): their migration history, applied by
  `webhooks migrate` after the core's, kept in the version table
  alembic_version_webhooks_ledger;
- `webhooks.ledger.emails`: the content of its emails.

The core never imports it.
"""

from pathlib import Path

from webhooks.ledger import handlers, hooks  # noqa: F401  (importing them registers them)

# The app's Alembic revision scripts (webhooks/migrate.py runs them after the core's).
MIGRATIONS = Path(__file__).parent / "migrations"
# The MetaData of its tables: `webhooks migrate --check` compares them with the database.
from webhooks.ledger import tables  # noqa: E402

METADATA = tables.metadata
