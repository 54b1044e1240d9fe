-- The ingest's statement (shared/queries.py EventJobInsert) for one new event of the
-- search benchmark's shape (search_events.sql: 1-2 KB, Stripe invoices, charges and
-- subscriptions), built in the database so that pgbench can send it. With and without
-- each search index: what the index costs each acknowledged delivery. benchmarks/pgbench.py
-- writes the statement in place of EVENT_JOB_INSERT, its parameters bound as below.
\set n random(100000000, 9000000000000000000)
-- :provider 'stripe'
-- :source 'stripe'
-- :event_id bench_stripe_event(:n) ->> 'id'
-- :event_type bench_stripe_event(:n) ->> 'type'
-- :body_sha256 NULL
-- :payload CAST(bench_stripe_event(:n) AS text)
-- :received_via 'delivery'
-- :trace_context NULL
-- :account NULL
-- :livemode NULL
EVENT_JOB_INSERT;
