-- One invoice job as worker/jobs.py applies it (queries.JobClaimDue with LIMIT 1, then the
-- Stripe handler's AccountLock, LedgerBook, OutboxInsert in a savepoint, and
-- JobMarkDone). benchmarks/pgbench.py wraps it in BEGIN ... COMMIT (repeated
-- JOBS_PER_TRANSACTION times), as worker/jobs.py commits each job with its effects.
SELECT j.id AS job_id, j.event_id AS event_id,
       e.payload -> 'data' -> 'object' ->> 'id' AS invoice_id,
       e.payload -> 'data' -> 'object' ->> 'customer' AS customer,
       e.payload -> 'data' -> 'object' ->> 'currency' AS currency,
       (e.payload -> 'data' -> 'object' ->> 'amount_paid')::bigint AS amount,
       e.payload -> 'data' -> 'object' ->> 'customer_email' AS email
FROM jobs j JOIN webhook_events e USING (provider, event_id)
WHERE j.id IN (
    SELECT id FROM jobs
    WHERE status = 'pending' AND run_at <= now()
    ORDER BY run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
) \gset
SAVEPOINT job;
INSERT INTO accounts (customer_id, currency) VALUES (:customer, :currency)
ON CONFLICT (customer_id, currency) DO UPDATE SET updated_at = now()
RETURNING balance;
WITH entry AS (
    INSERT INTO ledger_entries
        (customer_id, currency, amount, provider, event_id, entry_key, kind, reference)
    VALUES (:customer, :currency, :amount, 'stripe', :event_id, 'invoice:' || :invoice_id,
            'invoice', :invoice_id)
    ON CONFLICT (entry_key) DO NOTHING
    RETURNING amount
)
UPDATE accounts SET balance = balance + entry.amount, updated_at = now()
FROM entry
WHERE customer_id = :customer AND currency = :currency
RETURNING balance;
INSERT INTO outbox
    (idempotency_key, kind, to_address, subject, text_body, html_body, provider, event_id)
VALUES ('receipt:' || :invoice_id, 'receipt', :email,
        'Receipt for your payment of 19.99 USD',
        'Thank you. We received your payment of 19.99 USD for invoice ' || :invoice_id || '.',
        '<p>Thank you. We received your payment of <strong>19.99 USD</strong> for invoice '
        || :invoice_id || '.</p>', 'stripe', :event_id)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id;
RELEASE SAVEPOINT job;
UPDATE jobs SET status = 'done', attempts = attempts + 1, finished_at = now(),
                outcome = 'credited', last_error = NULL
WHERE id = :job_id AND status = 'pending';
