"""Acme's billing app: an app of one's own, built on the public API (`webhooks`) and
SQLAlchemy only (docs/your-app.md walks through it, file by file).

It records each paid Stripe invoice once, in a table of its own (`acme_paid_invoices`),
and thanks the customer by email once per invoice, whichever of the invoice's events
(`invoice.paid`, `invoice.payment_succeeded`) arrives, and however often. It runs where
WEBHOOK_HANDLERS names it: `acme_billing` alone, or beside the reference app,
`webhooks.ledger,acme_billing`. Importing it registers:

- `acme_billing.hooks`: the effects of an invoice event (`webhooks show`, the console)
  and an audit check (`webhooks audit`, the clock's hourly audit);
- `acme_billing.handlers`: the handler, with the SQL that makes it idempotent;
- `acme_billing.tables`: its table, on a MetaData of its own (METADATA below), and
  `acme_billing/migrations/` (MIGRATIONS below): its migration history, applied by
  `webhooks migrate` after the core's, in the version table alembic_version_acme_billing.

Its lock key is in `acme_billing.locking`, which this module does not import: a provider
has one lock key among the apps that run, and the reference app has Stripe's. Name it
(`WEBHOOK_HANDLERS=acme_billing,acme_billing.locking`) only where the reference app does
not run.
"""

from pathlib import Path

from . import handlers, hooks, tables  # noqa: F401  (importing them registers them)

# The app's Alembic revision scripts: `webhooks migrate` runs them after the core's.
MIGRATIONS = Path(__file__).parent / "migrations"
# Its tables: `webhooks migrate --check` compares them with the database.
METADATA = tables.metadata
