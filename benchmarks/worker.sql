-- One invoice job as worker/jobs.py applies it (queries.JobClaimDue with LIMIT 1, then the
-- Stripe handler's AccountLock, LedgerInsert, AccountAdd, OutboxInsert in a savepoint, and
-- JobMarkDone). worker.py repeats this block JOB_BATCH_SIZE times inside one
-- BEGIN ... COMMIT, as process_batch commits a batch of jobs together.
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
INSERT INTO ledger_entries
    (customer_id, currency, amount, provider, event_id, entry_key, kind, reference)
VALUES (:customer, :currency, :amount, 'stripe', :event_id, 'invoice:' || :invoice_id,
        'invoice', :invoice_id)
ON CONFLICT (entry_key) DO NOTHING
RETURNING id;
UPDATE accounts SET balance = balance + :amount, updated_at = now()
WHERE customer_id = :customer AND currency = :currency;
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
