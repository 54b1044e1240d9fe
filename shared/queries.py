"""Every SQL statement that carries a guarantee, named table-first, each with why it is
safe. Status changes are always guarded by the expected current status and their row
counts checked; the state machines are drawn once, on JobStatus and EmailStatus
(shared/models.py). The rows a claim returns are typed (ClaimedJob, ClaimedEmail).

Each comment ends with the tests that fail without its statement ("Proven by", files in
tests/integration/); docs/guarantees.md maps each guarantee to its statements and tests.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import text

from webhooks.shared.models import (
    ALL_SOURCES,
    EVENT_SEARCH_DOCUMENT,
    DeliveryStatus,
    EmailStatus,
    JobStatus,
    NotificationStatus,
    ReceivedVia,
)

PENDING, DONE, FAILED = JobStatus.PENDING, JobStatus.DONE, JobStatus.FAILED
EMAIL_PENDING, SENT, EMAIL_FAILED = EmailStatus.PENDING, EmailStatus.SENT, EmailStatus.FAILED
RECONCILE = ReceivedVia.RECONCILE

# --- ingest -------------------------------------------------------------------------

# The event and its job in ONE statement, hence one transaction and one round trip (run in
# autocommit, the statement is the transaction: it returns only once committed).
# The dedup decision is the insert of the event's key into webhook_dedup (models.py):
# ON CONFLICT DO NOTHING on the current generation's unique indexes makes a concurrent
# insert of the same key (the same (provider, event_id) from any source; for `standard` the
# same (provider, source, event_id); or the same body under the same event type for a
# provider whose ids are not signed: body_key, NULL for the others) wait for the other
# transaction and then insert nothing, and the NOT EXISTS probes find the key in an older
# generation (committed: a generation starts only once every insert into the one before
# has ended, shared/partitions.py). The event row is inserted only from the key this
# statement inserted, with its day (received_at) for its job's created_at: an event and its
# job are in the same day's partitions.
# No row: a duplicate. The job is held (kept out of the claims' range, shared/pausing.py)
# when its source is paused as the statement runs: one probe of paused_providers' primary
# key, a table of one row per pause (empty, nothing paused).
# Proven by: test_ingest.py::test_twenty_processes_deliver_the_same_event_at_once,
# test_hostile_input.py::test_a_captured_delivery_resent_with_new_ids_is_a_duplicate,
# test_hostile_input.py::test_one_body_under_two_types_is_two_events,
# test_reconcile.py::test_a_delivery_and_a_reconciliation_at_once_make_one_event,
# test_partitions.py::test_a_key_in_an_older_generation_is_a_duplicate.
DEDUP_KEYS = """
    SELECT webhook_dedup_key(:provider, :source, :event_id) AS key,
           webhook_body_key(:provider, :event_type, :body_sha256) AS body_key,
           (SELECT max(generation) FROM dedup_generations) AS generation
"""
EventJobInsert = text(f"""
    WITH keys AS ({DEDUP_KEYS}), dedup AS (
        INSERT INTO webhook_dedup (generation, key, body_key, source, event_id, received_at)
        SELECT generation, key, body_key, :source, :event_id, now() FROM keys
        WHERE NOT EXISTS (SELECT FROM webhook_dedup d
                          WHERE d.key = keys.key AND d.generation < keys.generation)
          AND NOT EXISTS (SELECT FROM webhook_dedup d
                          WHERE d.body_key = keys.body_key AND d.generation < keys.generation)
        ON CONFLICT DO NOTHING
        RETURNING key, received_at
    ), event AS (
        INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                    received_via, body_sha256, account, livemode,
                                    dedup_key, received_at)
        SELECT :provider, :source, :event_id, :event_type, CAST(:payload AS jsonb),
               :received_via, :body_sha256, :account, :livemode, key, received_at
        FROM dedup
        RETURNING provider, source, event_id, event_type, received_at
    )
    INSERT INTO jobs (provider, source, event_id, event_type, trace_context, held, created_at)
    SELECT provider, source, event_id, event_type, CAST(:trace_context AS text),
           EXISTS (SELECT 1 FROM paused_providers p WHERE p.provider = event.provider
                   AND p.source IN ('{ALL_SOURCES}', event.source)),
           received_at
    FROM event
    RETURNING id, status
""")

# A duplicate is counted by appending a row (no hot counter row to contend on), and
# answered with its job's status: one statement. The event it repeats is the one of its
# key, or else the one of its body under its type (a re-sent body under a new id): its dedup
# row names it (source, event_id) and its day, where its job is (none: pruned, so done).
# The duplicate's write also makes its commit wait for a synchronous standby, and the
# standby confirms WAL in order: so a duplicate of an event whose own commit still waits
# (it is visible on the primary already) is acknowledged only once the event is replicated
# too, or answered 503. The duplicate records the source that carried it.
# Proven by: test_ingest.py::test_duplicate_answers_job_status_and_is_counted,
# test_sources.py::test_the_same_stripe_event_on_two_sources_is_one_row_one_job,
# test_synchronous_commit.py::test_a_commit_the_standby_never_confirms_is_answered_503_within_10_s,
# test_partitions.py::test_a_redelivery_of_a_pruned_event_is_a_duplicate.
DuplicateCount = text(f"""
    WITH keys AS ({DEDUP_KEYS}), original AS (
        (SELECT d.source, d.event_id, d.received_at FROM webhook_dedup d, keys
         WHERE d.key = keys.key LIMIT 1)
        UNION ALL
        (SELECT d.source, d.event_id, d.received_at FROM webhook_dedup d, keys
         WHERE d.body_key = keys.body_key LIMIT 1)
        LIMIT 1
    ), counted AS (
        INSERT INTO webhook_duplicates (provider, source, event_id, event_source)
        SELECT :provider, :source, event_id, source FROM original
    )
    SELECT j.id, j.status, o.event_id FROM original o
    LEFT JOIN jobs j ON j.provider = :provider AND j.source = o.source
                    AND j.event_id = o.event_id AND j.created_at = o.received_at
""")

# --- jobs ---------------------------------------------------------------------------


class ClaimedJob(NamedTuple):
    """A row of JobClaimDue or JobClaimById: the job and its event."""

    id: int
    provider: str
    source: str
    event_id: str
    event_type: str
    attempts: int
    # The event's JSON body as Postgres prints it (the claims select payload::text): the
    # worker loads it itself (shared.payloads.load), so that a row Python cannot load fails
    # its own job instead of the claim.
    payload: Any
    received_at: datetime
    trace_context: str | None  # the ingest's traceparent (shared/tracing.py)
    account: str | None  # Stripe's connected account, else None
    livemode: bool | None  # Stripe's livemode, else None


# A job's source is paused: its provider is (`webhooks pause stripe`: a row with source '*')
# or the source is (`webhooks pause stripe/connect`: source 'connect'). OFFSET 0 keeps it a
# filter evaluated per row the scan returns (a subplan) instead of an anti-join: joined, the
# planner's guess of how many jobs a pause leaves (paused_providers, a few rows, is seldom
# analyzed) made it sort every pending job for a claim of 50 instead of reading the index.
PAUSED = f"""EXISTS (SELECT 1 FROM paused_providers p WHERE p.provider = jobs.provider
                     AND p.source IN ('{ALL_SOURCES}', jobs.source) OFFSET 0)"""

# Waiting: pending, its time come, its source not paused; due in the spec's sense (what the
# audit and the oldest-due gauge watch), held or not.
WAITING = f"status = '{PENDING}' AND run_at <= now() AND NOT {PAUSED}"

# Due: waiting and not held. The claims and the counts that wake workers use this one
# condition, so a paused source's jobs are neither claimed nor woken for. `NOT held` is the
# fast path: the claim reads the pending index's range held = false only, and a paused
# backlog is held (shared/pausing.py). The anti-join is the guarantee: it keeps a paused
# source's jobs unclaimed from the pause's commit on, before they are held and if one is
# missed (recorded as the pause committed; the sweeper holds it), at the cost of its probes
# per claimed job only (benchmarks/claim.py).
DUE = f"status = '{PENDING}' AND NOT held AND run_at <= now() AND NOT {PAUSED}"

# SKIP LOCKED: a job locked by another worker's open transaction is skipped, never waited
# for; the lock is held until this transaction commits the job's effects and its `done`.
# webhook_events first: every statement that locks both tables locks the events' before the
# jobs' (the ingest's inserts, these claims), as retention's drop of a day does
# (shared/partitions.py), so that none waits for the other in a circle.
# Proven by: test_jobs.py::test_batch_claims_race_without_overlap,
# test_worker_process.py::test_worker_killed_mid_transaction_loses_nothing_and_applies_once,
# test_pause.py::test_a_paused_providers_jobs_are_not_claimed_nor_due (DUE),
# test_pause_held.py::test_a_job_recorded_as_the_pause_commits_is_never_claimed (DUE's guard).
JobClaimDue = text(f"""
    SELECT j.id, j.provider, j.source, j.event_id, j.event_type, j.attempts,
           e.payload::text AS payload, e.received_at, j.trace_context, e.account, e.livemode
    FROM webhook_events e JOIN jobs j ON e.provider = j.provider AND e.source = j.source
        AND e.event_id = j.event_id AND e.received_at = j.created_at
    WHERE (j.id, j.created_at) IN (
        SELECT id, created_at FROM jobs
        WHERE {DUE}
        ORDER BY run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    ORDER BY j.run_at, j.id
""")

# Of a batch's lock keys (shared.hooks.lock_key: the reference app's are the customers its
# jobs touch), those that no other open batch holds, now held by this one until it commits.
# pg_try_*: never waits. Two batches then never queue on each other's keys (accounts); a
# job whose key is taken waits for a later claim.
# Proven by:
# test_jobs.py::test_a_batch_skips_the_customers_another_batch_holds_so_batches_never_queue.
JobKeysTaken = text("""
    SELECT key FROM unnest(CAST(:keys AS text[])) AS key
    WHERE pg_try_advisory_xact_lock(:space, hashtext(key))
""")
JOB_KEY_LOCK_SPACE = 0x77686B  # the first half of the two-int advisory lock key

# Claim one named job (a message's job) if it is due; the same locking rule.
# Proven by: test_jobs.py::test_two_connections_racing_for_one_job_exactly_one_wins.
JobClaimById = text(f"""
    SELECT j.id, j.provider, j.source, j.event_id, j.event_type, j.attempts,
           e.payload::text AS payload, e.received_at, j.trace_context, e.account, e.livemode
    FROM webhook_events e JOIN jobs j ON e.provider = j.provider AND e.source = j.source
        AND e.event_id = j.event_id AND e.received_at = j.created_at
    WHERE j.id = (
        SELECT id FROM jobs
        WHERE id = :id AND {DUE}
        FOR UPDATE SKIP LOCKED
    )
""")

# The search documents of the events of the jobs a marking statement below changed (its
# CTE `marked`), written in that statement, hence in the job's transaction: an event is
# searchable by its words once its job has run, whatever the outcome, and a rolled-back
# attempt leaves no document. The ingest never writes one (models.event_search: a GIN
# index is kept off the acknowledgement's transaction). ON CONFLICT DO NOTHING: a retried
# or replayed job's event has its document already (the payload never changes).
EVENT_SEARCH_INSERT = f"""
    INSERT INTO event_search (provider, source, event_id, received_at, document)
    SELECT provider, source, event_id, received_at, {EVENT_SEARCH_DOCUMENT}
    FROM webhook_events
    WHERE (provider, source, event_id, received_at)
          IN (SELECT provider, source, event_id, created_at FROM marked)
    ON CONFLICT DO NOTHING
"""

# Jobs marked done with their outcomes, in the transaction of their handlers' writes: a
# batch's in one statement, with their events' search documents. Guarded by status =
# pending: a job is completed once; the statement returns how many it marked.
# finished_at is this statement's time, the transaction's last before COMMIT (now() would
# be the time the batch began).
# Proven by: test_jobs.py::test_same_job_processed_twice_and_concurrently_applies_once,
# ::test_done_job_is_never_claimed_again,
# test_event_search_index.py::test_an_event_is_found_by_its_words_once_its_job_has_run.
JobMarkDoneMany = text(f"""
    WITH marked AS (
        UPDATE jobs SET status = '{DONE}', attempts = attempts + 1,
                        finished_at = statement_timestamp(),
                        outcome = done.outcome, last_error = NULL
        FROM unnest(CAST(:ids AS bigint[]), CAST(:created AS timestamptz[]),
                    CAST(:outcomes AS text[])) AS done (id, created_at, outcome)
        WHERE jobs.id = done.id AND jobs.created_at = done.created_at
          AND jobs.status = '{PENDING}'
        RETURNING jobs.provider, jobs.source, jobs.event_id, jobs.created_at
    ), indexed AS ({EVENT_SEARCH_INSERT})
    SELECT count(*) FROM marked
""")

# After a handler error (its writes rolled back to the savepoint): count the attempt and
# schedule the next one (held if its source was paused meanwhile: the pause skipped it,
# locked by this batch), or fail the job for good; either way with its event's search
# document, and the count of jobs marked (1, or 0 if it was not pending).
# Proven by (with JobMarkFailed):
# test_jobs.py::test_failing_handler_rolls_back_retries_with_backoff_then_fails,
# test_event_search_index.py::test_a_failed_jobs_event_is_searchable.
JobMarkRetry = text(f"""
    WITH marked AS (
        UPDATE jobs SET attempts = attempts + 1, last_error = :error,
                        run_at = now() + make_interval(secs => :delay), held = {PAUSED}
        WHERE id = :id AND created_at = :created_at AND status = '{PENDING}'
        RETURNING provider, source, event_id, created_at
    ), indexed AS ({EVENT_SEARCH_INSERT})
    SELECT count(*) FROM marked
""")

JobMarkFailed = text(f"""
    WITH marked AS (
        UPDATE jobs SET status = '{FAILED}', attempts = attempts + 1, last_error = :error,
                        finished_at = statement_timestamp()
        WHERE id = :id AND created_at = :created_at AND status = '{PENDING}'
        RETURNING provider, source, event_id, created_at
    ), indexed AS ({EVENT_SEARCH_INSERT})
    SELECT count(*) FROM marked
""")

# The search index's pending list merged into the index, by the clock's sweep: a GIN insert
# that overfills the list merges it in its own transaction, and this keeps that out of the
# worker's batches (models.event_search), for each partition's index. Postgres lets only
# the index's owner run it; returns the pages merged.
# Proven by: test_event_search_index.py::test_the_sweep_merges_the_search_pending_list.
EventSearchFlush = text("""
    SELECT coalesce(sum(gin_clean_pending_list(relid)), 0)
    FROM pg_partition_tree('ix_event_search_document') WHERE isleaf
""")

JobCountDue = text(f"""
    SELECT count(*) FROM jobs WHERE {DUE}
""")

# --- /metrics (web's scrape; cached there for a few seconds) ------------------------------
#
# Each must stay cheap at 10 million jobs (benchmarks/results/README.md). Pending and failed
# rows are few and reached through indexes (the partial pending index, and
# ix_jobs_status_finished_at for failed); done rows are most of the table, so a large table's
# done count is estimated from the planner's statistics (MetricsTableEstimates) instead.
# Pending and failed are two statements, not one UNION ALL: for the two together the
# planner chose a parallel plan, and a slower one.
# Proven by: test_metrics.py::test_large_tables_estimate_done_jobs_and_sent_emails.
MetricsJobsPending = text(f"""
    SELECT provider, count(*) AS n FROM jobs WHERE status = '{PENDING}' GROUP BY provider
""")
MetricsJobsFailed = text(f"""
    SELECT provider, count(*) AS n FROM jobs WHERE status = '{FAILED}' GROUP BY provider
""")

# Exact done counts: a scan of every done job, run only while the table is small.
MetricsJobsDone = text(f"""
    SELECT provider, count(*) AS n FROM jobs WHERE status = '{DONE}' GROUP BY provider
""")

# The planner's row estimates (-1: never analyzed) and, for jobs, each provider's share of
# the rows (pg_stats' most common values; a handful of providers are always all in it).
MetricsTableEstimates = text("""
    SELECT relname, reltuples FROM pg_class
    WHERE oid IN (to_regclass('jobs'), to_regclass('outbox'))
""")
MetricsJobsProviderShares = text("""
    SELECT unnest(CAST(CAST(most_common_vals AS text) AS text[])) AS provider,
           unnest(most_common_freqs) AS share
    FROM pg_stats
    WHERE schemaname = current_schema() AND tablename = 'jobs' AND attname = 'provider'
""")

# Waiting jobs' oldest run_at per source (the partial pending index; paused sources' jobs
# are not due; a held job of a source no longer paused is, until the sweeper releases it).
MetricsOldestDue = text(f"""
    SELECT provider, source, extract(epoch FROM now() - min(run_at)) AS age
    FROM jobs WHERE {WAITING}
    GROUP BY provider, source
""")

# Pending and failed emails through their partial indexes. All three exactly in one scan
# while the table is small; beyond, these two and sent estimated.
MetricsOutboxAll = text("SELECT status, count(*) AS n FROM outbox GROUP BY status")
MetricsOutboxPending = text(f"""
    SELECT count(*) FROM outbox WHERE status = '{EMAIL_PENDING}'
""")
MetricsOutboxFailed = text(f"""
    SELECT count(*) FROM outbox WHERE status = '{EMAIL_FAILED}'
""")

# --- the console's overview (shared/overview.py) -------------------------------------------

# Its tables' row estimates (-1: never analyzed): a large table is counted from statistics.
OverviewTableEstimates = text("""
    SELECT relname, reltuples FROM pg_class
    WHERE oid IN (to_regclass('webhook_events'), to_regclass('jobs'),
                  to_regclass('webhook_duplicates'))
""")

# Each table's most common (provider, source) pairs and their shares of its rows, as its
# last ANALYZE sampled them (the `mcv` statistics of migration 0019). The pairs' columns
# are in attnames' order (the columns' order in the table), read by name.
OverviewSourceShares = text("""
    SELECT s.tablename,
           s.most_common_vals[i][array_position(s.attnames, 'provider')] AS provider,
           s.most_common_vals[i][array_position(s.attnames, 'source')] AS source,
           s.most_common_freqs[i] AS share
    FROM pg_stats_ext s, generate_subscripts(s.most_common_freqs, 1) AS i
    WHERE s.schemaname = current_schema()
      AND s.statistics_name IN ('st_webhook_events_provider_source',
                                'st_jobs_provider_source', 'st_webhook_duplicates_provider_source')
""")

# Pending and failed jobs per source, exact: few rows, each through its index (as the
# metrics' two statements, not one UNION ALL).
OverviewJobsPending = text(f"""
    SELECT provider, source, status, count(*) AS n FROM jobs WHERE status = '{PENDING}'
    GROUP BY provider, source, status
""")
OverviewJobsFailed = text(f"""
    SELECT provider, source, status, count(*) AS n FROM jobs WHERE status = '{FAILED}'
    GROUP BY provider, source, status
""")

# --- pause and resume -----------------------------------------------------------------

# Idempotent: pausing a paused provider or source keeps its first paused_at. :source is
# '*' for the whole provider. RETURNING: newly paused.
ProviderPause = text("""
    INSERT INTO paused_providers (provider, source) VALUES (:provider, :source)
    ON CONFLICT (provider, source) DO NOTHING
    RETURNING paused_at
""")

# Resuming a provider ('*') resumes every source of it, each paused on its own included;
# resuming one source deletes that source's pause only.
ProviderResume = text(f"""
    DELETE FROM paused_providers
    WHERE provider = :provider AND (:source = '{ALL_SOURCES}' OR source = :source)
    RETURNING paused_at
""")

ProviderListPaused = text(
    "SELECT provider, source, paused_at FROM paused_providers ORDER BY provider, source")

# A pause's jobs held, a batch at a time (shared/pausing.py), each batch in a transaction
# that first locks the pause's row (ProviderLockPause: FOR KEY SHARE, so a resume's DELETE
# waits for the batch, then releases what it held; no row: resumed, stop). SKIP LOCKED: a
# job a worker claimed before the pause committed is not waited for; it is done, or its
# retry holds it (JobMarkRetry), or the sweeper does (JobHoldPaused).
# Proven by: test_pause_held.py::test_pause_holds_the_backlog_and_resume_releases_it_oldest_first.
ProviderLockPause = text("""
    SELECT 1 FROM paused_providers WHERE provider = :provider AND source = :source
    FOR KEY SHARE
""")
JobHoldPause = text(f"""
    UPDATE jobs SET held = true WHERE id IN (
        SELECT id FROM jobs
        WHERE status = '{PENDING}' AND NOT held AND provider = :provider
          AND (:source = '{ALL_SOURCES}' OR source = :source)
        LIMIT :limit
        FOR UPDATE SKIP LOCKED)
""")

# A resume's jobs released, oldest first (the claim's order), a batch at a time, each its
# own transaction: those of the resumed provider or source that no remaining pause covers
# (resuming stripe/connect while stripe is paused releases nothing).
JobReleaseResumed = text(f"""
    UPDATE jobs SET held = false WHERE id IN (
        SELECT id FROM jobs
        WHERE status = '{PENDING}' AND held AND provider = :provider
          AND (:source = '{ALL_SOURCES}' OR source = :source) AND NOT {PAUSED}
        ORDER BY run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED)
""")

# The sweeper's repair of the races that pausing cannot close by itself: a job recorded
# while a pause committed (its insert saw no pause; the pause's batches did not see the
# uncommitted job) is held now (until then DUE's anti-join kept it unclaimed); a job recorded
# while a resume committed (its insert saw the pause; the resume's batches did not see it)
# is released. A bounded batch each per sweep. The first reads nothing when nothing is
# paused (the one-time EXISTS), the second only the range held = true.
# Proven by: test_pause_held.py::test_a_job_recorded_as_the_pause_commits_is_never_claimed,
# ::test_a_job_recorded_as_the_resume_commits_is_released_by_the_sweeper.
JobHoldPaused = text(f"""
    UPDATE jobs SET held = true WHERE id IN (
        SELECT id FROM jobs
        WHERE status = '{PENDING}' AND NOT held AND EXISTS (SELECT 1 FROM paused_providers)
          AND {PAUSED}
        LIMIT :limit
        FOR UPDATE SKIP LOCKED)
""")
JobReleaseUnpaused = text(f"""
    UPDATE jobs SET held = false WHERE id IN (
        SELECT id FROM jobs
        WHERE status = '{PENDING}' AND held AND NOT {PAUSED}
        ORDER BY run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED)
""")

# A resumed provider's or source's due jobs: the wake-ups to send after a resume.
JobCountDueOf = text(f"""
    SELECT count(*) FROM jobs WHERE provider = :provider
        AND (:source = '{ALL_SOURCES}' OR source = :source) AND {DUE}
""")

# Replay, step 1: the named jobs and their statuses, locked, so the refusal of a done job
# and the move of the failed ones see the same rows.
# Proven by (with JobReplay):
# test_cli.py::test_replay_refuses_done_jobs_and_changes_nothing,
# test_console.py::test_replay_refuses_a_done_job_and_changes_nothing.
JobLockStatuses = text("""
    SELECT id, status FROM jobs WHERE id = ANY(:ids) ORDER BY id FOR UPDATE
""")

# Replay, step 1 with --all: the failed jobs matching the filters (each NULL filter
# matches everything), locked.
# Proven by: test_cli.py::test_replay_all_with_filters_and_dry_run,
# test_console.py::test_replay_all_says_how_many_then_moves_exactly_the_filtered_failed_jobs.
JobListFailedMatching = text(f"""
    SELECT id FROM jobs
    WHERE status = '{FAILED}'
      AND (CAST(:provider AS text) IS NULL OR provider = :provider)
      AND (CAST(:event_type AS text) IS NULL OR event_type = :event_type)
      AND (CAST(:since AS timestamptz) IS NULL OR created_at >= :since)
    ORDER BY id FOR UPDATE
""")

# Replay, step 2: only failed jobs move back to pending (a done job never runs again);
# attempts start again; held if their source is paused.
# Proven by: test_cli.py::test_replay_moves_failed_jobs_back_to_pending.
JobReplay = text(f"""
    UPDATE jobs SET status = '{PENDING}', attempts = 0, run_at = now(), finished_at = NULL,
                    held = {PAUSED}
    WHERE id = ANY(:ids) AND status = '{FAILED}'
    RETURNING id
""")

# Retention, row by row: a bounded batch of events whose job is done and finished before
# the cutoff, with their jobs and search documents, in one statement. Retention drops whole
# days (shared/partitions.py); what is left to this statement is what no dropped day held:
# the DEFAULT partitions' rows (unfinished jobs a dropped day kept, finished since, and rows
# recorded while no day's partition covered them), found through the done jobs' index; never
# the rows of the day the cutoff falls in, which its day's drop takes whole the next night.
# Never pending or failed work. SKIP LOCKED keeps two pruners out of each other's way.
# Returns how many events it deleted.
# Proven by: test_clock.py::test_prune_keeps_pending_and_failed_work_and_recent_events,
# test_partitions.py::test_a_kept_job_finished_later_is_pruned_from_the_default_partition,
# ::test_the_day_the_cutoff_falls_in_is_left_to_its_drop.
CUTOFF_DAY = "date_trunc('day', now() - make_interval(days => :days), 'UTC')"
EventDeleteFinished = text(f"""
    WITH old AS (
        SELECT j.provider, j.source, j.event_id, j.created_at FROM jobs j
        WHERE j.status = '{DONE}' AND j.finished_at < now() - make_interval(days => :days)
          AND j.created_at NOT BETWEEN {CUTOFF_DAY} AND {CUTOFF_DAY} + interval '1 day'
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), unsearched AS (
        DELETE FROM event_search s USING old
        WHERE s.provider = old.provider AND s.source = old.source AND s.event_id = old.event_id
    ), unjobbed AS (
        DELETE FROM jobs j USING old
        WHERE j.provider = old.provider AND j.source = old.source AND j.event_id = old.event_id
          AND j.created_at = old.created_at
    ), deleted AS (
        DELETE FROM webhook_events e USING old
        WHERE e.provider = old.provider AND e.source = old.source AND e.event_id = old.event_id
          AND e.received_at = old.created_at
        RETURNING 1
    )
    SELECT count(*) FROM deleted
""")

# Duplicate records older than the cutoff, a bounded batch (their received_at index).
# Proven by: test_partitions.py::test_prune_drops_whole_days_and_keeps_unfinished_work.
DuplicateDeleteOld = text("""
    DELETE FROM webhook_duplicates WHERE id IN (
        SELECT id FROM webhook_duplicates
        WHERE received_at < now() - make_interval(days => :days)
        LIMIT :limit)
""")

# --- reconciliation -----------------------------------------------------------------

# Which of a page of the provider's event ids are recorded already: their keys in the
# dedup table, the ingest's (so kept DEDUP_HORIZON_DAYS, past the events' retention).
# Read-only: the record itself goes through EventJobInsert, whose dedup insert is what
# makes it safe.
# Proven by: test_reconcile.py::test_stripe_records_what_was_never_delivered_once,
# test_partitions.py::test_reconciliation_counts_a_pruned_event_as_recorded.
EventListRecorded = text("""
    SELECT listed.event_id FROM unnest(CAST(:event_ids AS text[])) AS listed (event_id)
    WHERE EXISTS (SELECT FROM webhook_dedup d
                  WHERE d.key = webhook_dedup_key(:provider, :source, listed.event_id))
""")

# The connected accounts a Connect source's recorded events name: reconciliation lists
# each one's events (`Stripe-Account`), besides those `GET /v1/accounts` lists. A skip
# scan of ix_webhook_events_account (one index probe per account, not one row per event):
# each step the next account after the last one found.
EventListAccounts = text("""
    WITH RECURSIVE found(account) AS (
        (SELECT account FROM webhook_events
         WHERE provider = :provider AND source = :source AND account IS NOT NULL
         ORDER BY account LIMIT 1)
        UNION ALL
        SELECT (SELECT e.account FROM webhook_events e
                WHERE e.provider = :provider AND e.source = :source
                  AND e.account > found.account
                ORDER BY e.account LIMIT 1)
        FROM found WHERE found.account IS NOT NULL
    )
    SELECT account FROM found WHERE account IS NOT NULL
""")

ReconcileRunStart = text("""
    INSERT INTO reconcile_runs (provider, source, last_started_at)
    VALUES (:provider, :source, now())
    ON CONFLICT (provider, source) DO UPDATE SET last_started_at = now()
    RETURNING last_success_at
""")

ReconcileRunFinish = text("""
    UPDATE reconcile_runs
    SET last_success_at = CASE WHEN CAST(:error AS text) IS NULL
                               THEN last_started_at ELSE last_success_at END,
        last_error = :error, listed = :listed, recorded = :recorded,
        runs = runs + 1,
        failures = failures + CASE WHEN CAST(:error AS text) IS NULL THEN 0 ELSE 1 END,
        failures_in_a_row = CASE WHEN CAST(:error AS text) IS NULL THEN 0
                                 ELSE failures_in_a_row + 1 END
    WHERE provider = :provider AND source = :source
    RETURNING failures_in_a_row
""")

# For /metrics: per provider (its sources' rows summed), the runs, their failures, the
# last success of its stalest source (a source that stopped succeeding shows), and the
# events that only reconciliation found (the partial index ix_webhook_events_reconciled).
ReconcileRunState = text(f"""
    SELECT r.provider, r.runs, r.failures, r.last_success,
           (SELECT count(*) FROM webhook_events e
            WHERE e.provider = r.provider AND e.received_via = '{RECONCILE}') AS found
    FROM (SELECT provider, sum(runs) AS runs, sum(failures) AS failures,
                 extract(epoch FROM min(last_success_at)) AS last_success
          FROM reconcile_runs GROUP BY provider) r
""")

# For /metrics: seconds since the last successful run started, by the database's clock,
# for each source the sweeping clock reconciles periodically (its heartbeat's list: a
# source run only by hand, or no longer configured, is not expected to stay fresh); none
# before a source's first success. A row per source.
MetricsReconcileSourceAges = text("""
    SELECT r.provider, r.source, extract(epoch FROM now() - r.last_success_at) AS age
    FROM reconcile_runs r JOIN clock_heartbeats h ON h.name = :name
    WHERE r.last_success_at IS NOT NULL
      AND r.provider || '/' || r.source = ANY(h.reconcile_sources)
""")

# --- database timelines (failovers) ----------------------------------------------------

# The timeline the server writes on, recorded the first time it is seen: one row per
# timeline, the first the start (failover false), each later one a failover. The timeline
# is the first 8 hex digits of the current WAL file's name, which any role may read on a
# primary (pg_control_checkpoint() needs privileges, and lags a promotion until the next
# checkpoint). ON CONFLICT DO NOTHING: a timeline seen before writes nothing and returns no
# row; the caller holds ClockTryLock, so one clock records (the first row's failover =
# false is decided by one writer). RETURNING: the new timeline, if this is its first sight.
# Proven by: test_failover.py::test_a_new_timeline_is_a_failover_recorded_once.
CURRENT_TIMELINE = ("CAST(CAST('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8)"
                    " AS bit(32)) AS bigint)")
TimelineRecord = text(f"""
    INSERT INTO database_timelines (timeline_id, failover)
    SELECT {CURRENT_TIMELINE},
           EXISTS (SELECT 1 FROM database_timelines)
    ON CONFLICT (timeline_id) DO NOTHING
    RETURNING timeline_id, failover, first_seen_at
""")

# The latest failover (if any) and its age in seconds by the server's clock: where the
# clock's after-failover window starts.
# Proven by: test_failover.py::test_no_reconciliation_after_the_window,
# ::test_the_clock_reconciles_the_window_before_a_failover_once.
TimelineLatestFailover = text("""
    SELECT timeline_id, first_seen_at, extract(epoch FROM now() - first_seen_at) AS age
    FROM database_timelines WHERE failover
    ORDER BY first_seen_at DESC LIMIT 1
""")

# For the outbox dispatcher, in each claim's transaction (worker/outbox.py): whether the
# timeline this connection's server writes on has no row yet, and the latest recorded
# failover's age (null: none). No row for it: a promoted standby that no sweep has seen
# yet (the next one records it as a failover), or nothing recorded at all (a new database,
# or one whose first row was lost with the old primary: it cannot tell), so the dispatcher
# searches from the promotion on, not from the clock's next sweep. It records nothing:
# the clock does, under ClockTryLock, with its notification. Compared by identity, as
# TimelineRecord's ON CONFLICT does, not with the latest row: no server's clock orders
# the rows. One primary-key probe and one scan of a handful of rows, per claimed batch.
# Proven by: test_failover.py::test_a_timeline_not_recorded_yet_is_searched_before_the_sweep,
# ::test_within_the_window_every_first_send_is_searched_first,
# ::test_after_the_window_first_sends_are_not_searched,
# tests/acceptance/test_failover.py::test_no_receipt_twice_before_the_clock_sweeps.
TimelineOutboxSearch = text(f"""
    SELECT NOT EXISTS (SELECT 1 FROM database_timelines
                       WHERE timeline_id = {CURRENT_TIMELINE}) AS unrecorded,
           (SELECT extract(epoch FROM now() - max(first_seen_at)) FROM database_timelines
            WHERE failover) AS failover_age
""")

# The providers reconciled over the whole window after that failover.
FailoverReconcileListDone = text("""
    SELECT provider, source FROM failover_reconciles WHERE timeline_id = :timeline_id
""")

# Idempotent: a second clock's success (or a retried mark) changes nothing. Written only
# after a successful run, so a failed run (or a clock killed mid-run) is done again.
# Proven by: test_failover.py::test_the_clock_reconciles_the_window_before_a_failover_once,
# ::test_a_clock_with_periodic_runs_off_reconciles_after_a_failover.
FailoverReconcileMarkDone = text("""
    INSERT INTO failover_reconciles (timeline_id, provider, source)
    VALUES (:timeline_id, :provider, :source)
    ON CONFLICT (timeline_id, provider, source) DO NOTHING
""")

# For /metrics: the failovers seen, exact (a handful of rows), whichever clock saw them.
MetricsFailovers = text("SELECT count(*) FROM database_timelines WHERE failover")

# --- audit (`webhooks audit`, the clock's hourly run; shared/audit.py) ----------------
#
# Read-only, all in one snapshot: AuditSnapshot first, then every check, so that the
# checks see one moment (a job marked done and its effects committed together are seen
# together, or not at all). Each check names the rows it concerns. `:since`: NULL for every
# row, else only rows recorded since then.

# The first statement of the audit's transaction: a REPEATABLE READ snapshot that can
# write nothing (a write is refused by Postgres, SQLSTATE 25006). Transaction-scoped, so
# it holds through a pooler in transaction mode.
# Proven by: test_audit.py::test_the_audit_runs_in_one_read_only_repeatable_read_snapshot,
# ::test_the_audit_needs_only_the_right_to_read.
AuditSnapshot = text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

# Events without their job: EventJobInsert writes both in one statement, in the same day's
# partitions, and retention removes both, so none should exist. An anti-join through the
# jobs' UNIQUE (provider, source, event_id, created_at) index.
# Proven by: test_audit.py::test_the_audit_names_an_event_without_its_job.
AuditEventsWithoutJob = text("""
    SELECT e.provider, e.event_id, e.event_type, e.received_at FROM webhook_events e
    WHERE NOT EXISTS (SELECT FROM jobs j
                      WHERE j.provider = e.provider AND j.source = e.source
                        AND j.event_id = e.event_id AND j.created_at = e.received_at)
      AND (CAST(:since AS timestamptz) IS NULL OR e.received_at >= :since)
    ORDER BY e.provider, e.event_id
""")

# Emails marked sent without Postmark's message id: OutboxMarkSentMany sets both, so
# such a row was marked by something else, and cannot be matched to Postmark's message.
# Proven by: test_audit.py::test_the_audit_names_a_sent_email_without_its_message_id.
AuditSentWithoutMessageId = text(f"""
    SELECT id, idempotency_key, kind, provider, event_id FROM outbox
    WHERE status = '{SENT}' AND coalesce(message_id, '') = ''
      AND (CAST(:since AS timestamptz) IS NULL OR created_at >= :since)
    ORDER BY id
""")

# Jobs due for longer than :stale seconds (WAITING: pending, run_at passed, source not
# paused, held or not): the sweeper wakes workers for due work (and releases held jobs of
# sources no longer paused) every SWEEP_INTERVAL_SECONDS, so one due for long means no
# worker or clock runs, or its handler hangs. The partial pending index.
# Proven by: test_audit.py::test_the_audit_names_a_job_due_too_long_unless_paused.
AuditJobsDueTooLong = text(f"""
    SELECT id, provider, event_id, event_type, attempts, run_at,
           extract(epoch FROM now() - run_at) AS due_seconds
    FROM jobs
    WHERE {WAITING} AND run_at < now() - make_interval(secs => :stale)
      AND (CAST(:since AS timestamptz) IS NULL OR created_at >= :since)
    ORDER BY run_at, id
""")

# The clock's last run, per check (0: it held), read by web's /metrics. One statement:
# the counts of one run replace the previous run's, checks no longer registered go.
# Proven by: test_audit.py::test_the_clock_logs_and_records_the_violations_metrics_show.
AuditResultsReplace = text("""
    WITH ran AS (
        SELECT * FROM unnest(CAST(:checks AS text[]), CAST(:counts AS integer[]))
            AS ran (check_name, violations)
    ), gone AS (
        DELETE FROM audit_results WHERE check_name <> ALL(CAST(:checks AS text[]))
    )
    INSERT INTO audit_results (check_name, violations, ran_at)
    SELECT check_name, violations, now() FROM ran
    ON CONFLICT (check_name) DO UPDATE
        SET violations = EXCLUDED.violations, ran_at = EXCLUDED.ran_at
""")

AuditResultsRead = text("""
    SELECT check_name, violations, extract(epoch FROM ran_at) AS ran_at FROM audit_results
""")

# --- periodic tasks -----------------------------------------------------------------

# One clock at a time runs a task: a second clock (started by mistake) skips the tick
# rather than wait. Held until the transaction ends.
# Proven by: test_clock.py::test_lost_messages_with_two_clocks_are_applied_once.
ClockTryLock = text("SELECT pg_try_advisory_xact_lock(hashtext(:name))")

# The clock's heartbeat: each sweep stamps its row with the database's now() (the clock web
# reads it by: no skew between hosts) and the intervals the clock runs with. Written under
# the sweep's ClockTryLock, in its transaction: the stamp says a sweep committed.
# Proven by: test_metrics.py::test_the_clock_sweep_age_and_intervals_are_on_metrics,
# test_clock.py::test_lost_messages_with_two_clocks_are_applied_once.
ClockHeartbeatStamp = text("""
    INSERT INTO clock_heartbeats (name, beat_at, interval_seconds, reconcile_interval_seconds,
                                  reconcile_sources)
    VALUES (:name, now(), :interval_seconds, :reconcile_interval_seconds,
            CAST(:reconcile_sources AS text[]))
    ON CONFLICT (name) DO UPDATE
        SET beat_at = EXCLUDED.beat_at, interval_seconds = EXCLUDED.interval_seconds,
            reconcile_interval_seconds = EXCLUDED.reconcile_interval_seconds,
            reconcile_sources = EXCLUDED.reconcile_sources
""")

# For /metrics: each heartbeat's age by the database's clock (a row or two).
MetricsClockHeartbeats = text("""
    SELECT name, extract(epoch FROM now() - beat_at) AS age, interval_seconds,
           reconcile_interval_seconds
    FROM clock_heartbeats
""")

# --- outbox -------------------------------------------------------------------------

# UNIQUE (idempotency_key): one email per key however many jobs try to queue it.
# Proven by: test_stripe_handlers.py::test_payment_failed_queues_one_email_per_event.
OutboxInsert = text("""
    INSERT INTO outbox
        (idempotency_key, kind, to_address, subject, text_body, html_body, provider, event_id,
         trace_context)
    VALUES
        (:key, :kind, :to_address, :subject, :text_body, :html_body, :provider, :event_id,
         :trace_context)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
""")

OutboxCountDue = text(f"""
    SELECT count(*) FROM outbox WHERE status = '{EMAIL_PENDING}' AND run_at <= now()
""")



class ClaimedEmail(NamedTuple):
    """A row of OutboxClaimDue; attempts counts the attempt this claim started."""

    id: int
    idempotency_key: str
    kind: str
    to_address: str
    subject: str
    text_body: str
    html_body: str
    provider: str | None
    event_id: str | None
    attempts: int
    trace_context: str | None  # the traceparent of the job that queued it


# SKIP LOCKED: concurrent dispatchers claim disjoint rows. The same statement records the
# attempt and pushes run_at past a lease, and commits before any call to Postmark: the row
# is invisible to other claims while in flight, and comes back by itself if we die.
# Proven by:
# test_outbox.py::test_a_claimed_row_is_hidden_from_other_dispatchers_for_its_lease,
# ::test_two_dispatchers_racing_send_each_key_once,
# ::test_a_dispatcher_killed_mid_send_leaves_one_message_per_key.
OutboxClaimDue = text(f"""
    UPDATE outbox
    SET attempts = attempts + 1, attempted_at = now(),
        run_at = now() + make_interval(secs => :lease)
    WHERE id IN (
        SELECT id FROM outbox
        WHERE status = '{EMAIL_PENDING}' AND run_at <= now()
        ORDER BY run_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    RETURNING id, idempotency_key, kind, to_address, subject, text_body, html_body,
              provider, event_id, attempts, trace_context
""")

# The sent rows of one dispatch in one statement. Each is guarded by status and by the
# attempt this dispatcher claimed: once its lease ran out and another dispatcher
# re-claimed the row (attempts + 1), a late mark updates nothing. RETURNING names the rows
# whose guard held.
# Proven by: test_outbox.py::test_a_dispatcher_whose_lease_ran_out_cannot_touch_the_row.
OutboxMarkSentMany = text(f"""
    UPDATE outbox SET status = '{SENT}', message_id = sent.message_id, sent_at = now(),
                      last_error = NULL
    FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[]),
                CAST(:message_ids AS text[])) AS sent (id, attempts, message_id)
    WHERE outbox.id = sent.id AND outbox.status = '{EMAIL_PENDING}'
      AND outbox.attempts = sent.attempts
    RETURNING outbox.id
""")

# Same guard; the row stays pending and is claimed again (and searched first) after delay.
OutboxMarkRetry = text(f"""
    UPDATE outbox SET run_at = now() + make_interval(secs => :delay), last_error = :error
    WHERE id = :id AND status = '{EMAIL_PENDING}' AND attempts = :attempts
""")

# Retry (the console): a failed email back to pending, under the same idempotency key.
# attempts = 1, not 0: the next claim makes it attempt 2, so the dispatcher searches
# Postmark for the key before sending (an earlier attempt may have been delivered).
# Proven by:
# test_console.py::test_retry_puts_a_failed_email_back_to_pending_with_the_same_key,
# test_outbox.py::test_an_unanswered_send_is_found_by_search_and_not_sent_again (the
# search).
OutboxRetryFailed = text(f"""
    UPDATE outbox SET status = '{EMAIL_PENDING}', attempts = 1, run_at = now(),
                      last_error = NULL
    WHERE id = :id AND status = '{EMAIL_FAILED}'
    RETURNING id
""")

# Same guard: only the dispatcher holding the current attempt can fail the row.
# Proven by: test_outbox.py::test_exhausted_attempts_fail_the_email,
# ::test_an_invalid_address_fails_at_once_and_is_never_retried.
OutboxMarkFailed = text(f"""
    UPDATE outbox SET status = '{EMAIL_FAILED}', last_error = :error
    WHERE id = :id AND status = '{EMAIL_PENDING}' AND attempts = :attempts
""")

# --- notifications (shared/notifications.py, worker/notify.py) -------------------------

N_PENDING, N_SENT, N_FAILED = (NotificationStatus.PENDING, NotificationStatus.SENT,
                               NotificationStatus.FAILED)
D_PENDING, D_SENT, D_FAILED = DeliveryStatus.PENDING, DeliveryStatus.SENT, DeliveryStatus.FAILED

# A kind and source's coalescing window, locked: a new key's row is inserted closed
# ('epoch'), an existing one is "updated" to itself, which locks it either way in one
# statement. A concurrent recorder of the same key waits here for the first one's COMMIT,
# then sees the window that one opened: one immediate notification per window.
# Proven by: test_notifications.py::test_two_connections_recording_one_key_make_one_immediate.
NotificationWindowLock = text("""
    INSERT INTO notification_windows AS w (kind, provider, source, closes_at)
    VALUES (:kind, :provider, :source, 'epoch')
    ON CONFLICT (kind, provider, source) DO UPDATE SET closes_at = w.closes_at
    RETURNING w.closes_at > now() AS open, w.closes_at, w.tail_id,
              extract(epoch FROM w.closes_at - now()) AS closes_in
""")

NotificationWindowOpen = text("""
    UPDATE notification_windows
    SET closes_at = now() + make_interval(secs => :window), tail_id = NULL
    WHERE kind = :kind AND provider = :provider AND source = :source
""")

NotificationWindowTail = text("""
    UPDATE notification_windows SET tail_id = :tail_id
    WHERE kind = :kind AND provider = :provider AND source = :source
""")

# The notification and one delivery per configured channel, in one statement; with no
# channel it is recorded `sent` at once (nothing will ever send it).
NotificationInsert = text(f"""
    WITH n AS (
        INSERT INTO notifications (id, kind, provider, source, count, status, due_at,
                                   details, sent_at)
        SELECT :id, :kind, :provider, :source, :count,
               CASE WHEN cardinality(c.channels) = 0 THEN '{N_SENT}' ELSE '{N_PENDING}' END,
               coalesce(CAST(:due_at AS timestamptz), now()), CAST(:details AS jsonb),
               CASE WHEN cardinality(c.channels) = 0 THEN now() END
        FROM (SELECT CAST(:channels AS text[]) AS channels) c
        RETURNING id, due_at
    )
    INSERT INTO notification_deliveries (notification_id, channel, run_at)
    SELECT n.id, channel, n.due_at FROM n, unnest(CAST(:channels AS text[])) AS channel
""")

# Adds to a window's tail unless the dispatcher sealed it (its claim's UPDATE waits behind
# this row lock, and reads the count after it): a sealed tail's count never changes, so
# every channel sends the same count. No row: the caller inserts a new tail.
# Proven by: test_notifications.py::test_a_burst_is_one_immediate_and_one_tail_with_the_rest.
NotificationAddToTail = text("""
    UPDATE notifications SET count = count + :count,
        details = jsonb_set(details, '{samples}', (
            SELECT coalesce(jsonb_agg(value ORDER BY ord), '[]'::jsonb) FROM (
                SELECT value, ord FROM jsonb_array_elements(
                    coalesce(details -> 'samples', '[]'::jsonb) || CAST(:samples AS jsonb))
                    WITH ORDINALITY AS t (value, ord)
                ORDER BY ord LIMIT 5) kept))
    WHERE id = :id AND NOT sealed
""")

# A source's failed attempts in its current tumbling window (a window older than
# NOTIFY_WINDOW_SECONDS starts again at this attempt). The row stays locked to COMMIT.
NotificationHealthFail = text("""
    INSERT INTO notification_health AS h (provider, source, failed_attempts)
    VALUES (:provider, :source, :attempts)
    ON CONFLICT (provider, source) DO UPDATE SET
        failed_attempts = CASE WHEN h.window_started_at <= now() - make_interval(secs => :window)
                               THEN EXCLUDED.failed_attempts
                               ELSE h.failed_attempts + EXCLUDED.failed_attempts END,
        window_started_at = CASE WHEN h.window_started_at
                                      <= now() - make_interval(secs => :window)
                                 THEN now() ELSE h.window_started_at END
    RETURNING failed_attempts, failing
""")

# Guarded by NOT failing: provider.failing once per failing period.
# Proven by: test_notifications.py::test_failing_and_recovered_once_per_period.
NotificationHealthMarkFailing = text("""
    UPDATE notification_health SET failing = true
    WHERE provider = :provider AND source = :source AND NOT failing
""")

class RecoveredSource(NamedTuple):
    provider: str
    source: str


# The failing sources among those with a done job, no longer failing: provider.recovered
# once (guarded by failing; rows locked in key order). While nothing fails, a probe of the
# empty partial index ix_notification_health_failing: a successful batch's only cost.
# Proven by: test_notifications.py::test_failing_and_recovered_once_per_period.
NotificationHealthRecover = text("""
    UPDATE notification_health h
    SET failing = false, failed_attempts = 0, window_started_at = now()
    FROM (SELECT provider, source FROM notification_health
          WHERE failing AND (provider, source) IN (
              SELECT * FROM unnest(CAST(:providers AS text[]), CAST(:sources AS text[])))
          ORDER BY provider, source FOR UPDATE) recovered
    WHERE h.provider = recovered.provider AND h.source = recovered.source
    RETURNING h.provider, h.source
""")


class ClaimedDelivery(NamedTuple):
    """A row of NotificationDeliveryClaim; attempts counts the attempt this claim started."""

    notification_id: str
    channel: str
    attempts: int


# SKIP LOCKED: concurrent dispatchers claim disjoint deliveries. As OutboxClaimDue: the
# attempt is counted and the row leased past the HTTP call, committed before it.
# Proven by: test_notify.py::test_a_claimed_delivery_is_hidden_for_its_lease.
NotificationDeliveryClaim = text(f"""
    UPDATE notification_deliveries d
    SET attempts = attempts + 1, run_at = now() + make_interval(secs => :lease)
    FROM (SELECT notification_id, channel FROM notification_deliveries
          WHERE status = '{D_PENDING}' AND run_at <= now()
          ORDER BY run_at, notification_id, channel
          LIMIT :limit
          FOR UPDATE SKIP LOCKED) due
    WHERE d.notification_id = due.notification_id AND d.channel = due.channel
    RETURNING d.notification_id, d.channel, d.attempts
""")

# In the claim's transaction: the claimed deliveries' notifications sealed, their rows
# locked in id order (two claims of one notification's channels never cross), each
# waiting behind a recorder adding to it; what it returns is final.
# Proven by: test_notifications.py::test_a_sealed_tail_is_not_added_to.
NotificationSeal = text("""
    UPDATE notifications n SET sealed = true
    FROM (SELECT id FROM notifications WHERE id = ANY(CAST(:ids AS text[]))
          ORDER BY id FOR UPDATE) claimed
    WHERE n.id = claimed.id
    RETURNING n.id, n.kind, n.provider, n.source, n.count AS occurrences, n.created_at,
              n.details
""")

# The marks, each guarded by status and the attempt this dispatcher claimed (as the
# outbox's): a dispatcher whose lease ran out changes nothing.
NotificationDeliveryMarkSent = text(f"""
    UPDATE notification_deliveries SET status = '{D_SENT}', sent_at = now(), last_error = NULL
    WHERE notification_id = :id AND channel = :channel AND status = '{D_PENDING}'
      AND attempts = :attempts
""")

NotificationDeliveryMarkRetry = text(f"""
    UPDATE notification_deliveries
    SET run_at = now() + make_interval(secs => :delay), last_error = :error
    WHERE notification_id = :id AND channel = :channel AND status = '{D_PENDING}'
      AND attempts = :attempts
""")

NotificationDeliveryMarkFailed = text(f"""
    UPDATE notification_deliveries SET status = '{D_FAILED}', last_error = :error
    WHERE notification_id = :id AND channel = :channel AND status = '{D_PENDING}'
      AND attempts = :attempts
""")

# After a delivery's mark, in its transaction: the notification is sent once every
# delivery is, failed once one failed. The row is locked first (FOR UPDATE), so two
# dispatchers marking two channels of one notification settle it one after the other,
# the second seeing the first's mark.
NotificationLock = text("SELECT id FROM notifications WHERE id = :id FOR UPDATE")

NotificationSettle = text(f"""
    UPDATE notifications n
    SET status = CASE WHEN d.failed THEN '{N_FAILED}' ELSE '{N_SENT}' END,
        sent_at = CASE WHEN d.failed THEN NULL ELSE now() END
    FROM (SELECT bool_or(status = '{D_FAILED}') AS failed,
                 bool_or(status = '{D_PENDING}') AS pending
          FROM notification_deliveries WHERE notification_id = :id) d
    WHERE n.id = :id AND n.status = '{N_PENDING}' AND (d.failed OR NOT d.pending)
    RETURNING n.status
""")

# The clock's sweep: deliveries due (coalesced tails whose window closed included).
NotificationCountDue = text(f"""
    SELECT count(*) FROM notification_deliveries
    WHERE status = '{D_PENDING}' AND run_at <= now()
""")

# `webhooks notifications` and the console: newest first, with each delivery's state.
NotificationList = text("""
    SELECT n.id, n.kind, n.provider, n.source, n.count, n.status, n.created_at, n.due_at,
           n.sent_at, n.details,
           coalesce((SELECT jsonb_object_agg(d.channel, d.status) FROM notification_deliveries d
                     WHERE d.notification_id = n.id), '{}'::jsonb) AS channels
    FROM notifications n
    WHERE (CAST(:kind AS text) IS NULL OR n.kind = :kind)
      AND (CAST(:status AS text) IS NULL OR n.status = :status)
    ORDER BY n.created_at DESC, n.id DESC
    LIMIT :limit
""")

# For /metrics: notifications per status (few rows: one per operational event).
NotificationCountByStatus = text("SELECT status, count(*) FROM notifications GROUP BY status")


# Retention: notifications no longer pending, older than the cutoff, in bounded batches
# (their deliveries by ON DELETE CASCADE); SKIP LOCKED keeps out of a dispatcher's way.
NotificationDeleteFinished = text(f"""
    DELETE FROM notifications WHERE id IN (
        SELECT id FROM notifications
        WHERE status <> '{N_PENDING}' AND created_at < now() - make_interval(days => :days)
        LIMIT :limit FOR UPDATE SKIP LOCKED)
""")

NotificationWindowDeleteClosed = text("""
    DELETE FROM notification_windows WHERE closes_at < now() - make_interval(days => :days)
""")
