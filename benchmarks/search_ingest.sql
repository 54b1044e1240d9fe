-- The ingest's statement (shared/queries.py EventJobInsert) for one new event of the
-- search benchmark's shape (search_events.sql: 1-2 KB, Stripe invoices, charges and
-- subscriptions), built in the database so that pgbench can send it. With and without
-- each search index: what the index costs each acknowledged delivery.
\set n random(100000000, 9000000000000000000)
WITH event AS (
    INSERT INTO webhook_events (provider, source, event_id, event_type, payload)
    SELECT 'stripe', 'stripe', e->>'id', e->>'type', e FROM bench_stripe_event(:n) AS e
    ON CONFLICT DO NOTHING
    RETURNING provider, source, event_id, event_type
)
INSERT INTO jobs (provider, source, event_id, event_type)
SELECT provider, source, event_id, event_type FROM event
RETURNING id, status;
