-- The ingest's one transaction (shared/queries.py EventInsert + JobInsert) for a new
-- Stripe invoice event with a random id: what each acknowledged delivery costs the database.
\set n random(1, 9000000000000000000)
\set c :n % 1000
BEGIN;
INSERT INTO webhook_events (provider, event_id, event_type, payload)
VALUES ('stripe', 'evt_pgb_' || :n, 'invoice.paid', CAST(
    '{"id": "evt_pgb_' || :n || '", "object": "event", "type": "invoice.paid", '
    '"created": 1767225600, "data": {"object": {"id": "in_pgb_' || :n || '", '
    '"object": "invoice", "customer": "cus_' || :c || '", "amount_paid": 1999, '
    '"amount_due": 1999, "currency": "usd", "customer_email": "buyer@example.com"}}}'
    AS jsonb))
ON CONFLICT (provider, event_id) DO NOTHING
RETURNING id;
INSERT INTO jobs (provider, event_id, event_type)
VALUES ('stripe', 'evt_pgb_' || :n, 'invoice.paid')
RETURNING id, status;
COMMIT;
