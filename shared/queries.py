"""Every SQL statement that carries a guarantee, named table-first, each with why it is safe.

State machines (status changes are always guarded by the expected current status and
their row counts checked):

    jobs:    pending --(handler committed)--> done
             pending --(attempts exhausted or permanent error)--> failed
             failed  --(webhooks replay)--> pending

    outbox:  pending --(Postmark accepted, or search found it)--> sent
             pending --(4xx that cannot succeed, or attempts exhausted)--> failed
"""

from __future__ import annotations

from sqlalchemy import text

# --- ingest -------------------------------------------------------------------------

# The event and its job in ONE statement, hence one transaction and one round trip (run in
# autocommit, the statement is the transaction: it returns only once committed).
# ON CONFLICT DO NOTHING: a concurrent insert of the same (provider, event_id) waits for
# the other transaction and then inserts nothing, so exactly one delivery creates the event;
# the job is inserted only from the event row this statement inserted. No row: a duplicate.
EventJobInsert = text("""
    WITH event AS (
        INSERT INTO webhook_events (provider, event_id, event_type, payload)
        VALUES (:provider, :event_id, :event_type, CAST(:payload AS jsonb))
        ON CONFLICT (provider, event_id) DO NOTHING
        RETURNING provider, event_id, event_type
    )
    INSERT INTO jobs (provider, event_id, event_type)
    SELECT provider, event_id, event_type FROM event
    RETURNING id, status
""")

# A duplicate is counted by appending a row (no hot counter row to contend on), and
# answered with its job's status: one statement.
DuplicateCounted = text("""
    WITH counted AS (
        INSERT INTO webhook_duplicates (provider, event_id) VALUES (:provider, :event_id)
    )
    SELECT id, status FROM jobs WHERE provider = :provider AND event_id = :event_id
""")

# --- jobs ---------------------------------------------------------------------------

# SKIP LOCKED: a job locked by another worker's open transaction is skipped, never waited
# for; the lock is held until this transaction commits the job's effects and its `done`.
JobClaimDue = text("""
    SELECT j.id, j.provider, j.event_id, j.event_type, j.attempts, e.payload, e.received_at
    FROM jobs j JOIN webhook_events e USING (provider, event_id)
    WHERE j.id IN (
        SELECT id FROM jobs
        WHERE status = 'pending' AND run_at <= now()
        ORDER BY run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    ORDER BY j.run_at, j.id
""")

# Of a batch's lock keys (the customers its jobs touch), those that no other open batch
# holds, now held by this one until it commits. pg_try_*: never waits. Two batches then
# never queue on each other's accounts; a job whose key is taken waits for a later claim.
JobKeysTaken = text("""
    SELECT key FROM unnest(CAST(:keys AS text[])) AS key
    WHERE pg_try_advisory_xact_lock(:space, hashtext(key))
""")
JOB_KEY_LOCK_SPACE = 0x77686B  # the first half of the two-int advisory lock key

# Claim one named job (a message's job) if it is due; the same locking rule.
JobClaimById = text("""
    SELECT j.id, j.provider, j.event_id, j.event_type, j.attempts, e.payload, e.received_at
    FROM jobs j JOIN webhook_events e USING (provider, event_id)
    WHERE j.id = (
        SELECT id FROM jobs
        WHERE id = :id AND status = 'pending' AND run_at <= now()
        FOR UPDATE SKIP LOCKED
    )
""")

# Jobs marked done with their outcomes, in the transaction of their handlers' writes: a
# batch's in one statement. Guarded by status = 'pending': a job is completed once.
# finished_at is this statement's time, the transaction's last before COMMIT (now() would
# be the time the batch began).
JobMarkDoneMany = text("""
    UPDATE jobs SET status = 'done', attempts = attempts + 1,
                    finished_at = statement_timestamp(),
                    outcome = done.outcome, last_error = NULL
    FROM unnest(CAST(:ids AS bigint[]), CAST(:outcomes AS text[])) AS done (id, outcome)
    WHERE jobs.id = done.id AND jobs.status = 'pending'
""")

# After a handler error (its writes rolled back to the savepoint): count the attempt and
# schedule the next one, or fail the job for good.
JobMarkRetry = text("""
    UPDATE jobs SET attempts = attempts + 1, last_error = :error,
                    run_at = now() + make_interval(secs => :delay)
    WHERE id = :id AND status = 'pending'
""")

JobMarkFailed = text("""
    UPDATE jobs SET status = 'failed', attempts = attempts + 1, last_error = :error,
                    finished_at = statement_timestamp()
    WHERE id = :id AND status = 'pending'
""")

JobCountDue = text("""
    SELECT count(*) FROM jobs WHERE status = 'pending' AND run_at <= now()
""")

JobCountPending = text("SELECT count(*) FROM jobs WHERE status = 'pending'")

# Replay: only failed jobs move back to pending; attempts start again.
JobReplay = text("""
    UPDATE jobs SET status = 'pending', attempts = 0, run_at = now(), finished_at = NULL
    WHERE id = ANY(:ids) AND status = 'failed'
    RETURNING id
""")

# --- ledger -------------------------------------------------------------------------

# Locks the account row first (ON CONFLICT DO UPDATE takes the row lock), so every
# transaction touching a customer's money takes that customer's lock before anything else.
AccountLock = text("""
    INSERT INTO accounts (customer_id, currency) VALUES (:customer_id, :currency)
    ON CONFLICT (customer_id, currency) DO UPDATE SET updated_at = now()
    RETURNING balance
""")

# UNIQUE (entry_key): a business fact (an invoice credit, a refund level) is booked once,
# and the balance moves only by the entry this very statement inserted: both or neither.
# One statement, one round trip; run after AccountLock, which holds the account row.
LedgerBook = text("""
    WITH entry AS (
        INSERT INTO ledger_entries
            (customer_id, currency, amount, provider, event_id, entry_key, kind, reference)
        VALUES
            (:customer_id, :currency, :amount, :provider, :event_id, :entry_key, :kind,
             :reference)
        ON CONFLICT (entry_key) DO NOTHING
        RETURNING amount
    )
    UPDATE accounts SET balance = balance + entry.amount, updated_at = now()
    FROM entry
    WHERE customer_id = :customer_id AND currency = :currency
    RETURNING balance
""")

# Read under the account lock, so two refunds of one charge cannot both see the old total.
LedgerRefundedTotal = text("""
    SELECT coalesce(-sum(amount), 0) FROM ledger_entries
    WHERE kind = 'refund' AND reference = :charge_id
""")

# Applies the event only if it is not older than the last one applied to the subscription.
SubscriptionUpsert = text("""
    INSERT INTO subscriptions
        (subscription_id, customer_id, status, last_event_created, last_event_id)
    VALUES (:subscription_id, :customer_id, :status, :created, :event_id)
    ON CONFLICT (subscription_id) DO UPDATE
        SET customer_id = EXCLUDED.customer_id, status = EXCLUDED.status,
            last_event_created = EXCLUDED.last_event_created,
            last_event_id = EXCLUDED.last_event_id, updated_at = now()
        WHERE subscriptions.last_event_created <= EXCLUDED.last_event_created
    RETURNING subscription_id
""")

# --- outbox -------------------------------------------------------------------------

# UNIQUE (idempotency_key): one email per key however many jobs try to queue it.
OutboxInsert = text("""
    INSERT INTO outbox
        (idempotency_key, kind, to_address, subject, text_body, html_body, provider, event_id)
    VALUES
        (:key, :kind, :to_address, :subject, :text_body, :html_body, :provider, :event_id)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
""")

OutboxCountDue = text("""
    SELECT count(*) FROM outbox WHERE status = 'pending' AND run_at <= now()
""")

# SKIP LOCKED: concurrent dispatchers claim disjoint rows. The same statement records the
# attempt and pushes run_at past a lease, and commits before any call to Postmark: the row
# is invisible to other claims while in flight, and comes back by itself if we die.
OutboxClaimDue = text("""
    UPDATE outbox
    SET attempts = attempts + 1, attempted_at = now(),
        run_at = now() + make_interval(secs => :lease)
    WHERE id IN (
        SELECT id FROM outbox
        WHERE status = 'pending' AND run_at <= now()
        ORDER BY run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    RETURNING id, idempotency_key, kind, to_address, subject, text_body, html_body,
              provider, event_id, attempts
""")

# The sent rows of one dispatch in one statement. Each is guarded by status and by the
# attempt this dispatcher claimed: once its lease ran out and another dispatcher
# re-claimed the row (attempts + 1), a late mark updates nothing. RETURNING names the rows
# whose guard held.
OutboxMarkSentMany = text("""
    UPDATE outbox SET status = 'sent', message_id = sent.message_id, sent_at = now(),
                      last_error = NULL
    FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[]),
                CAST(:message_ids AS text[])) AS sent (id, attempts, message_id)
    WHERE outbox.id = sent.id AND outbox.status = 'pending' AND outbox.attempts = sent.attempts
    RETURNING outbox.id
""")

# Same guard; the row stays pending and is claimed again (and searched first) after delay.
OutboxMarkRetry = text("""
    UPDATE outbox SET run_at = now() + make_interval(secs => :delay), last_error = :error
    WHERE id = :id AND status = 'pending' AND attempts = :attempts
""")

# Same guard: only the dispatcher holding the current attempt can fail the row.
OutboxMarkFailed = text("""
    UPDATE outbox SET status = 'failed', last_error = :error
    WHERE id = :id AND status = 'pending' AND attempts = :attempts
""")
