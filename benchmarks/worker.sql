-- A batch of invoice jobs as worker/jobs.py applies it, in one transaction: one claim of
-- up to :batch due jobs (queries.JobClaimDue; their fields gathered into arrays, in the
-- customer order the worker runs them in), the Stripe handler's LedgerBook (and its
-- AccountMove for an account new to that statement) and OutboxInsert for each job K (the
-- block between the markers, repeated with K = 1..N by benchmarks/pgbench.py), and one
-- queries.JobMarkDoneMany for them all, with their events' search documents
-- (EVENT_SEARCH_INSERT: queries.EVENT_SEARCH_INSERT, put in by benchmarks/pgbench.py).
SELECT array_agg(j.id ORDER BY c.customer, j.id) AS ids,
       array_agg(j.created_at ORDER BY c.customer, j.id) AS created,
       array_agg(j.event_id ORDER BY c.customer, j.id) AS event_ids,
       array_agg(c.invoice ORDER BY c.customer, j.id) AS invoices,
       array_agg(c.customer ORDER BY c.customer, j.id) AS customers,
       array_agg(c.currency ORDER BY c.customer, j.id) AS currencies,
       array_agg(c.amount ORDER BY c.customer, j.id) AS amounts,
       array_agg(c.email ORDER BY c.customer, j.id) AS emails
FROM jobs j JOIN webhook_events e ON e.provider = j.provider AND e.source = j.source
    AND e.event_id = j.event_id AND e.received_at = j.created_at,
LATERAL (SELECT e.payload -> 'data' -> 'object' ->> 'id' AS invoice,
                e.payload -> 'data' -> 'object' ->> 'customer' AS customer,
                e.payload -> 'data' -> 'object' ->> 'currency' AS currency,
                (e.payload -> 'data' -> 'object' ->> 'amount_paid')::bigint AS amount,
                e.payload -> 'data' -> 'object' ->> 'customer_email' AS email) c
WHERE (j.id, j.created_at) IN (
    SELECT id, created_at FROM jobs
    WHERE status = 'pending' AND run_at <= now()
    ORDER BY run_at, id
    LIMIT BATCH
    FOR UPDATE SKIP LOCKED
) \gset
-- job
WITH account AS (
    INSERT INTO accounts (customer_id, currency)
    VALUES ((CAST(:customers AS text[]))[K], (CAST(:currencies AS text[]))[K])
    ON CONFLICT (customer_id, currency) DO UPDATE SET updated_at = now() WHERE false
    RETURNING 1
), entry AS (
    INSERT INTO ledger_entries
        (customer_id, currency, amount, provider, event_id, entry_key, kind, reference)
    SELECT (CAST(:customers AS text[]))[K], (CAST(:currencies AS text[]))[K],
           (CAST(:amounts AS bigint[]))[K], 'stripe', (CAST(:event_ids AS text[]))[K],
           'invoice:' || (CAST(:invoices AS text[]))[K], 'invoice',
           (CAST(:invoices AS text[]))[K]
    FROM (SELECT count(*) FROM account) AS locked
    ON CONFLICT (entry_key) DO NOTHING
    RETURNING amount
), moved AS (
    UPDATE accounts SET balance = balance + entry.amount, updated_at = now()
    FROM entry
    WHERE customer_id = (CAST(:customers AS text[]))[K]
      AND currency = (CAST(:currencies AS text[]))[K]
    RETURNING balance
)
SELECT (EXISTS (SELECT FROM entry) AND NOT EXISTS (SELECT FROM moved))::int AS move \gset
\if :move
UPDATE accounts SET balance = balance + (CAST(:amounts AS bigint[]))[K], updated_at = now()
WHERE customer_id = (CAST(:customers AS text[]))[K]
  AND currency = (CAST(:currencies AS text[]))[K]
RETURNING balance;
\endif
INSERT INTO outbox
    (idempotency_key, kind, to_address, subject, text_body, html_body, provider, event_id)
VALUES ('receipt:' || (CAST(:invoices AS text[]))[K], 'receipt', (CAST(:emails AS text[]))[K],
        'Receipt for your payment of 19.99 USD',
        'Thank you. We received your payment of 19.99 USD for invoice '
        || (CAST(:invoices AS text[]))[K] || '.',
        '<p>Thank you. We received your payment of <strong>19.99 USD</strong> for invoice '
        || (CAST(:invoices AS text[]))[K] || '.</p>', 'stripe', (CAST(:event_ids AS text[]))[K])
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id;
-- end job
WITH marked AS (
    UPDATE jobs SET status = 'done', attempts = attempts + 1, finished_at = now(),
                    outcome = 'credited', last_error = NULL
    FROM unnest(CAST(:ids AS bigint[]), CAST(:created AS timestamptz[])) AS done (id, created_at)
    WHERE jobs.id = done.id AND jobs.created_at = done.created_at AND jobs.status = 'pending'
    RETURNING jobs.provider, jobs.source, jobs.event_id, jobs.created_at
), indexed AS (EVENT_SEARCH_INSERT)
SELECT count(*) FROM marked;
