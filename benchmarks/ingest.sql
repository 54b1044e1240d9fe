-- The ingest's one transaction for a new Stripe invoice event with a random id, as
-- shared/recording.py runs it: shared/queries.py EventJobInsert, one statement in
-- autocommit (the statement is the transaction). What each acknowledged delivery costs
-- the database. benchmarks/pgbench.py writes the statement in place of EVENT_JOB_INSERT,
-- each of its parameters bound as a `-- :name value` line below says (NULL where
-- recording.py passes None for a Stripe delivery: a signed id has no body key).
\set n random(1, 9000000000000000000)
\set c :n % 1000
-- :provider 'stripe'
-- :source 'stripe'
-- :event_id 'evt_pgb_' || :n
-- :event_type 'invoice.paid'
-- :body_sha256 NULL
-- :payload '{"id": "evt_pgb_' || :n || '", "object": "event", "type": "invoice.paid", "created": 1767225600, "data": {"object": {"id": "in_pgb_' || :n || '", "object": "invoice", "customer": "cus_' || :c || '", "amount_paid": 1999, "amount_due": 1999, "currency": "usd", "customer_email": "buyer@example.com"}}}'
-- :received_via 'delivery'
-- :trace_context NULL
-- :account NULL
-- :livemode NULL
EVENT_JOB_INSERT;
