-- The ingest's one transaction for a new Stripe invoice event with a random id, as
-- shared/recording.py runs it: shared/queries.py EventJobInsert, one statement in
-- autocommit (the statement is the transaction). What each acknowledged delivery costs
-- the database.
\set n random(1, 9000000000000000000)
\set c :n % 1000
WITH event AS (
    INSERT INTO webhook_events (provider, source, event_id, event_type, payload)
    VALUES ('stripe', 'stripe', 'evt_pgb_' || :n, 'invoice.paid', CAST(
        '{"id": "evt_pgb_' || :n || '", "object": "event", "type": "invoice.paid", '
        '"created": 1767225600, "data": {"object": {"id": "in_pgb_' || :n || '", '
        '"object": "invoice", "customer": "cus_' || :c || '", "amount_paid": 1999, '
        '"amount_due": 1999, "currency": "usd", "customer_email": "buyer@example.com"}}}'
        AS jsonb))
    ON CONFLICT DO NOTHING
    RETURNING provider, source, event_id, event_type
)
INSERT INTO jobs (provider, source, event_id, event_type, held)
SELECT provider, source, event_id, event_type,
       EXISTS (SELECT 1 FROM paused_providers p WHERE p.provider = event.provider
               AND p.source IN ('*', event.source))
FROM event
RETURNING id, status;
