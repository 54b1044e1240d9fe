"""The reference Stripe app: a ledger of accounts per (customer, currency), credited by paid
invoices and debited by refunds, and the subscriptions' statuses; receipts and
payment-failed emails through the outbox. Built on the public API only, as your own app
would be:

- `webhooks.ledger.tables`: its tables, on the core's MetaData (one migration history, one
  `alembic check`);
- `webhooks.ledger.hooks`: its lock key, its effects (`webhooks show`, the console) and its audit
  checks (`shared.hooks`); imports only shared/, so the console loads it without worker/;
- `webhooks.ledger.handlers`: its handlers (`worker.handlers`), with the SQL that carries its
  guarantees;
- `webhooks.ledger.emails`: the content of its emails.

The core never imports it: `shared.hooks` names its modules among the built-in ones.
"""
