-- The search benchmark's drain (benchmarks/search.py): what the worker's transaction does
-- to the jobs the ingest adds, as far as search is concerned. One claim of up to
-- DRAIN_BATCH due jobs (queries.JobClaimDue's locking) and their done mark in one
-- statement, with their events' documents written (queries.EVENT_SEARCH_INSERT, put in
-- place of the INDEXED marker for the search arm) or not (the none arm). No handler: only
-- the difference search makes to a batch. A pause between transactions, as a worker waits
-- for its next wake-up instead of spinning on an empty queue.
WITH marked AS (
    UPDATE jobs SET status = 'done', attempts = attempts + 1,
                    finished_at = statement_timestamp(), outcome = 'done', last_error = NULL
    WHERE (id, created_at) IN (
        SELECT id, created_at FROM jobs
        WHERE status = 'pending' AND run_at <= now()
        ORDER BY run_at, id
        LIMIT DRAIN_BATCH
        FOR UPDATE SKIP LOCKED
    )
    RETURNING jobs.provider, jobs.source, jobs.event_id, jobs.created_at
) -- INDEXED
SELECT count(*) FROM marked;
\sleep DRAIN_PAUSE_MS ms
