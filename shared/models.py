"""The schema, as SQLAlchemy Core tables. Alembic migrations must match it (CI runs
`alembic check`). The constraints here carry the guarantees:

- webhook_dedup UNIQUE (key) within a generation, and across the generations by the
  ingest's check: one row per logical event, however many deliveries and whichever source
  carries it (the key is (provider, event_id), and for `standard` (provider, source,
  event_id), since its senders' ids may collide: shared/sources.py); an event row is
  written only with its dedup row. (provider, source, event_id) is unique for every event
  row of a day's partition: the key jobs and duplicates refer to, with the day.
- jobs UNIQUE (provider, source, event_id, created_at): one job per event.
- outbox UNIQUE (idempotency_key): one email per key.
- event_search PRIMARY KEY (provider, source, event_id, received_at): one search document
  per event.

These are the core's tables only: an app declares its tables on a MetaData of its own and
creates them in a migration history of its own (MIGRATIONS, webhooks/migrate.py; the
reference app's are in webhooks/ledger/tables.py), so `alembic check` compares the core's.

The status vocabularies (JobStatus, EmailStatus) are defined here, with their state
machines; the CHECK constraints, the statements in shared/queries.py and the code use them.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR, UUID

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)



class JobStatus(StrEnum):
    """A job's state. Every change is guarded by the expected current status (row count
    checked), so a job is completed once and a done job never runs again::

        pending --(handler's writes committed, in the same transaction)--> done
        pending --(error, attempts left)--> pending, run_at = now() + backoff
        pending --(attempts exhausted, or PermanentJobError)--> failed
        failed  --(replay: webhooks replay, the console)--> pending, attempts = 0

    A worker killed mid-job leaves its transaction open; Postgres rolls it back and the
    job is still pending. There is no "running" state: a claimed job is a locked row.
    """

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


class EmailStatus(StrEnum):
    """An outbox email's state; every change is guarded by the status and by the attempt
    the dispatcher claimed (a dispatcher whose lease ran out cannot mark the row)::

        pending --(claim: attempts + 1, run_at = now() + lease; committed before the
                   HTTP call)--> pending, in flight
        in flight --(Postmark accepted, or the search found the key)--> sent
        in flight --(a 4xx the message can never pass)--> failed
        in flight --(5xx, timeout, lost response; attempts left)--> pending after backoff
        in flight --(the same, attempts exhausted)--> failed
        in flight --(dispatcher killed)--> pending again when the lease runs out
        failed  --(retry: the console)--> pending, same idempotency key
    """

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class ReceivedVia(StrEnum):
    """How an event was first recorded: a provider's delivery, or reconciliation with the
    provider's API (an event never delivered). Whichever comes second is a duplicate."""

    DELIVERY = "delivery"
    RECONCILE = "reconcile"


def one_of(vocabulary: type[StrEnum], column: str = "status") -> str:
    """SQL for a CHECK on a vocabulary column: "status IN ('pending', 'done', 'failed')"."""
    return f"{column} IN ({', '.join(repr(str(member)) for member in vocabulary)})"


NOW = text("now()")
ALL_SOURCES = "*"  # paused_providers.source: the pause covers every source of the provider
# What `webhooks events --search` and the console's search match: the event id and every
# string and number in the payload, as words (full-text search, no stemming). A tsvector
# holds at most 1 MB, and a payload of distinct words makes one about three times its
# size: so a payload over SEARCH_PAYLOAD_BYTES (as text) is searched by its first
# SEARCH_PREFIX_CHARS characters instead (keys included), and no payload up to
# MAX_BODY_BYTES makes the insert fail.
SEARCH_PAYLOAD_BYTES = 262_144
SEARCH_PREFIX_CHARS = 65_536
SEARCH_PENDING_LIST_KB = 65_536  # ix_event_search_document's gin_pending_list_limit
EVENT_SEARCH_DOCUMENT = (  # over a webhook_events row: event_search.document's value
    "(to_tsvector('simple'::regconfig, event_id) ||\nCASE\n"
    f"    WHEN octet_length(payload::text) <= {SEARCH_PAYLOAD_BYTES} THEN "
    "jsonb_to_tsvector('simple'::regconfig, payload, '[\"string\", \"numeric\"]'::jsonb)\n"
    f"    ELSE to_tsvector('simple'::regconfig, \"left\"(payload::text, {SEARCH_PREFIX_CHARS}))"
    "\nEND)"
)

# Events, their jobs and their search documents are partitioned by the time each event was
# recorded, one partition per UTC day (shared/partitions.py creates them ahead and retention
# drops them whole), with a DEFAULT partition for whatever no day's range covers: the
# unfinished rows a dropped day kept, and any row recorded while no partition covered its
# day. A job's created_at is its event's received_at (queries.EventJobInsert writes it from
# the event row), so an event, its job and its search document are always in the same day's
# partitions, and every join between them names the partition key.
#
# A partitioned table's unique indexes must hold its partition key, so the key that makes
# one logical event one row lives in webhook_dedup instead: an event row is inserted only
# in the statement that inserted its dedup row (queries.EventJobInsert), or, for any other
# writer, through the trigger webhook_events_dedup_guard, which inserts the row's key and
# skips the row when the key is taken.
EVENTS_PARTITION_KEY = "received_at"
JOBS_PARTITION_KEY = "created_at"

webhook_events = Table(
    "webhook_events",
    metadata,
    Column("id", BigInteger, Identity(), nullable=False),
    Column("provider", Text, nullable=False),
    # The source that delivered or reconciled it first (the default source's is the
    # provider's name); Stripe's `account` (a connected account's events) and `livemode`.
    Column("source", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("received_via", Text, nullable=False, server_default=ReceivedVia.DELIVERY.value),
    # SHA-256 of the body as received, for the providers that do not sign their event ids
    # (shared.providers.signs_event_id): a body recorded once under a type is a duplicate
    # under any id of that type (another type is another event: Shopify's orders/create
    # and orders/paid carry one body). The dedup table holds its key (body_key).
    Column("body_sha256", LargeBinary, nullable=True),
    Column("account", Text),
    Column("livemode", Boolean),
    # Its row's key in webhook_dedup (NULL in rows recorded before the table existed).
    Column("dedup_key", UUID, nullable=True),
    CheckConstraint(one_of(ReceivedVia, "received_via"), name="received_via"),
    PrimaryKeyConstraint("id", EVENTS_PARTITION_KEY),
    # One event per (provider, source, event_id): its job and search document refer to it.
    Index("ux_webhook_events_provider_source_event_id_received_at",
          "provider", "source", "event_id", "received_at", unique=True),
    # `webhooks show PROVIDER EVENT_ID`, `events --search ID`: an event by its id alone.
    Index("ix_webhook_events_provider_event_id", "provider", "event_id"),
    # Events only reconciliation found, counted per provider on /metrics: a sign that
    # deliveries go missing. Few rows, so a small partial index.
    Index("ix_webhook_events_reconciled", "provider",
          postgresql_where=text(f"received_via = '{ReceivedVia.RECONCILE}'")),
    # The connected accounts a Connect source's events name, read by its reconciliation
    # (EventListAccounts skips from one account to the next): only Stripe's connected
    # accounts' rows.
    Index("ix_webhook_events_account", "provider", "source", "account",
          postgresql_where=text("account IS NOT NULL")),
    # The listing's order (newest first) and its keyset pagination (shared/events.py).
    Index("ix_webhook_events_received_at_id", "received_at", "id"),
    postgresql_partition_by=f"RANGE ({EVENTS_PARTITION_KEY})",
)

# The keys that make a redelivery a duplicate, kept DEDUP_HORIZON_DAYS, longer than the
# events (RETENTION_DAYS): one narrow row per event. `key` is webhook_dedup_key(provider,
# scope, event_id) (scope: the source for a provider whose senders' ids may collide,
# `standard`; '' for the others), `body_key` webhook_body_key(provider, event_type,
# body_sha256) for the providers that do not sign their ids. The row names its event
# (source, event_id, received_at: its partition), so that a duplicate finds the event's job
# in one partition.
#
# Partitioned by generation (dedup_generations), each a period of DEDUP_HORIZON_DAYS / 3:
# a key is unique within a generation by the unique indexes, and across generations by the
# insert's check of the older ones, which take no more rows once a newer generation starts
# (shared/partitions.py starts one under a lock that waits for every insert in flight). A
# generation goes whole once its last key is older than the horizon.
webhook_dedup = Table(
    "webhook_dedup",
    metadata,
    Column("generation", Integer, nullable=False),
    Column("key", UUID, nullable=False),
    Column("body_key", UUID, nullable=True),
    Column("source", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False),
    Index("ux_webhook_dedup_key_generation", "key", "generation", unique=True),
    Index("ux_webhook_dedup_body_key_generation", "body_key", "generation", unique=True,
          postgresql_where=text("body_key IS NOT NULL")),
    postgresql_partition_by="LIST (generation)",
)

dedup_generations = Table(
    "dedup_generations",
    metadata,
    Column("generation", Integer, nullable=False, autoincrement=False),
    Column("started_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("generation"),
)

# The search document of each event whose job has run (shared/events.py searches it),
# EVENT_SEARCH_DOCUMENT of its row: written by the worker in the job's transaction, whatever
# the outcome (done, retried, failed), never by the ingest. A GIN index is costly to keep
# up to date row by row (its pending list is flushed by whichever insert fills it), and
# here that cost is off the acknowledgement's transaction (migration 0017). Partitioned as
# its event is, by its event's received_at ('-infinity' in the documents written before
# the partitioning, all in the partition that holds those events' days).
event_search = Table(
    "event_search",
    metadata,
    Column("provider", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("document", TSVECTOR, nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False,
           server_default=text("'-infinity'::timestamp with time zone")),
    PrimaryKeyConstraint("provider", "source", "event_id", EVENTS_PARTITION_KEY),
    # New documents go to the index's pending list (an append); the clock's sweep merges
    # it into the index (queries.EventSearchFlush), so that no worker's batch does: an
    # insert that overfills the list merges it in its own transaction. The limit is room
    # for many sweeps' worth of documents; a search reads the pending list too.
    Index("ix_event_search_document", "document", postgresql_using="gin",
          postgresql_with={"gin_pending_list_limit": SEARCH_PENDING_LIST_KB}),
    postgresql_partition_by=f"RANGE ({EVENTS_PARTITION_KEY})",
)

# One row per duplicate delivery, so `webhooks stats` can count duplicates per day.
webhook_duplicates = Table(
    "webhook_duplicates",
    metadata,
    Column("id", BigInteger, Identity(), nullable=False),
    Column("provider", Text, nullable=False),
    Column("source", Text, nullable=False),  # the source that carried the duplicate
    Column("event_id", Text, nullable=False),
    Column("event_source", Text, nullable=False),  # the event's own source: its key
    Column("received_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("id"),
    Index(None, "provider", "event_id"),
    Index(None, "received_at"),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", BigInteger, Identity(), nullable=False),
    Column("provider", Text, nullable=False),
    Column("source", Text, nullable=False),  # its event's
    Column("event_id", Text, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=JobStatus.PENDING.value),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
    Column("outcome", Text),
    Column("run_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("finished_at", DateTime(timezone=True)),
    # The W3C traceparent of the ingest's request span when tracing is on (shared/tracing.py)
    Column("trace_context", Text),
    # A pending job whose source is paused (shared/pausing.py): kept out of the claim's
    # range of the pending index, so that a paused backlog costs the claims nothing.
    Column("held", Boolean, nullable=False, server_default=text("false")),
    PrimaryKeyConstraint("id", JOBS_PARTITION_KEY),
    CheckConstraint(one_of(JobStatus), name="status"),
    CheckConstraint("attempts >= 0", name="attempts"),
    # The claim query's index, in its ORDER BY (run_at, id) after `held`: a claim reads
    # the range held = false only, in the claim's order, so its LIMIT rows even when
    # thousands share one run_at (a replay, a bulk insert) and however many paused jobs
    # wait in the range held = true; resume and the sweeper read that range. Only pending
    # work is in it, all of it: the pending counts scan it whole.
    Index("ix_jobs_pending_held_run_at_id", "held", "run_at", "id",
          postgresql_where=text(f"status = '{JobStatus.PENDING}'")),
    Index(None, "status", "finished_at"),
    # One job per event (EventJobInsert inserts it from the event row it inserted).
    Index("ux_jobs_provider_source_event_id_created_at",
          "provider", "source", "event_id", "created_at", unique=True),
    postgresql_partition_by=f"RANGE ({JOBS_PARTITION_KEY})",
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", BigInteger, Identity(), nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=EmailStatus.PENDING.value),
    Column("to_address", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("text_body", Text, nullable=False),
    Column("html_body", Text, nullable=False),
    Column("provider", Text),
    Column("event_id", Text),
    Column("attempts", Integer, nullable=False, server_default="0"),
    # Set before each call to Postmark: a row with an attempt whose outcome was never
    # recorded is checked against Postmark's message search before it is sent again.
    Column("attempted_at", DateTime(timezone=True)),
    Column("run_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("last_error", Text),
    Column("message_id", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("sent_at", DateTime(timezone=True)),
    # The traceparent of the job's span that queued it, when tracing is on
    Column("trace_context", Text),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("idempotency_key"),
    CheckConstraint(one_of(EmailStatus), name="status"),
    Index("ix_outbox_pending_run_at_id", "run_at", "id",
          postgresql_where=text(f"status = '{EmailStatus.PENDING}'")),
    # The failed ones: /metrics counts them, the console lists them (few, on a big table)
    Index("ix_outbox_failed_id", "id", postgresql_where=text(f"status = '{EmailStatus.FAILED}'")),
)

class CallStatus(StrEnum):
    """A call's state (SPEC "Calls to other APIs"; worker/calls.py sends them)::

        pending --(the target answered 2xx)--> sent
        pending --(a 4xx other than 409 and 429)--> failed
        pending --(its outcome still unknown when its key's lifetime has passed)--> ambiguous
        ambiguous --(`webhooks calls settle KEY --sent`)--> sent
        ambiguous --(`webhooks calls settle KEY --resend`: a new key)--> pending
    """

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"


# One row per call a handler queued to another API (ctx.queue_call), made once by
# worker/calls.py after its job commits, with `idempotency_key` as the target's key (the
# handler's `key`, or a new one after `webhooks calls settle --resend`).
calls = Table(
    "calls",
    metadata,
    Column("id", BigInteger, Identity(), nullable=False),
    Column("key", Text, nullable=False),
    Column("target", Text, nullable=False),
    Column("method", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("params", JSONB, nullable=False),
    Column("idempotency_key", Text, nullable=False),
    # The job's event: whose source's API key and connected account a `stripe` call uses
    Column("provider", Text),
    Column("event_id", Text),
    Column("source", Text),
    Column("account", Text),
    Column("status", Text, nullable=False, server_default=CallStatus.PENDING.value),
    Column("attempts", Integer, nullable=False, server_default="0"),
    # When the idempotency key was first sent: the target keeps it for the key's lifetime
    # from then (CALL_<N>_KEY_HOURS); past it, an unknown outcome is never sent again.
    Column("first_attempt_at", DateTime(timezone=True)),
    Column("run_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("response_status", Integer),
    Column("response", JSONB),
    Column("last_error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("sent_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("id"),
    UniqueConstraint("key"),
    CheckConstraint(one_of(CallStatus), name="status"),
    Index("ix_calls_pending_run_at_id", "run_at", "id",
          postgresql_where=text(f"status = '{CallStatus.PENDING}'")),
    Index("ix_calls_unsettled_id", "id",
          postgresql_where=text(f"status IN ('{CallStatus.FAILED}', "
                                f"'{CallStatus.AMBIGUOUS}')")),
)

# One row per source that reconciliation has run for (the default source's `source` is its
# provider's name): where the clock's next run starts (the last success, less a margin)
# and what the last run found.
reconcile_runs = Table(
    "reconcile_runs",
    metadata,
    Column("provider", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("last_started_at", DateTime(timezone=True), nullable=False),
    Column("last_success_at", DateTime(timezone=True)),
    Column("last_error", Text),
    Column("listed", Integer, nullable=False, server_default="0"),
    Column("recorded", Integer, nullable=False, server_default="0"),
    Column("runs", BigInteger, nullable=False, server_default="0"),
    Column("failures", BigInteger, nullable=False, server_default="0"),
    # Runs failed since the last success: the third makes a reconcile.failing notification.
    Column("failures_in_a_row", Integer, nullable=False, server_default="0"),
    PrimaryKeyConstraint("provider", "source"),
)

# Providers and sources whose jobs no worker claims (`webhooks pause`): their deliveries
# are still acknowledged and recorded; `webhooks resume` deletes the row and the jobs run.
# source '*' (ALL_SOURCES): every source of the provider, those configured later included.
paused_providers = Table(
    "paused_providers",
    metadata,
    Column("provider", Text, nullable=False),
    Column("source", Text, nullable=False, server_default=ALL_SOURCES),
    Column("paused_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("provider", "source"),
)

# Every timeline the database server was seen writing on (shared/failover.py). The first
# recorded is the start (failover false); each one after it is a failover: a standby was
# promoted, and what an asynchronous standby had not received is gone. The clock records
# them; /metrics counts the failovers, and the after-failover reconciliation and the
# outbox's search-before-first-send take their window from the latest one's first_seen_at.
database_timelines = Table(
    "database_timelines",
    metadata,
    Column("timeline_id", BigInteger, nullable=False, autoincrement=False),
    Column("first_seen_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("failover", Boolean, nullable=False),
    PrimaryKeyConstraint("timeline_id"),
)

# The after-failover reconciliations done: one row per timeline and provider once that
# provider's run over the whole window succeeded. A clock restarted mid-way reconciles the
# providers without a row.
failover_reconciles = Table(
    "failover_reconciles",
    metadata,
    Column("timeline_id", BigInteger, nullable=False),
    Column("provider", Text, nullable=False),
    Column("source", Text, nullable=False),  # each source reconciled after the failover
    Column("finished_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("timeline_id", "provider", "source"),
    ForeignKeyConstraint(["timeline_id"], ["database_timelines.timeline_id"],
                         ondelete="CASCADE"),
)

# The clock's last audit (shared/audit.py), one row per check: how many violations it
# found (0: the check held) and when; web's /metrics shows them (webhooks_audit_violations).
audit_results = Table(
    "audit_results",
    metadata,
    Column("check_name", Text, nullable=False),
    Column("violations", Integer, nullable=False),
    Column("ran_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("check_name"),
)

# The clock's heartbeat: one row per periodic task (today `sweep`), stamped by each run in
# its own transaction, with the intervals the clock runs with, so that web's /metrics can
# say how long ago the clock last swept and whether periodic reconciliation is on
# (webhooks_clock_*; deploy/prometheus/alerts.yml's WebhookClockStopped and
# WebhookReconciliationStale): reconcile_sources, `provider/source` of each source it
# reconciles periodically (none when that is off). A stopped clock writes nothing, which
# nothing else shows.
SWEEP_HEARTBEAT = "sweep"  # the sweep's row
clock_heartbeats = Table(
    "clock_heartbeats",
    metadata,
    Column("name", Text, nullable=False),
    Column("beat_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("interval_seconds", Float, nullable=False),
    Column("reconcile_interval_seconds", Float, nullable=False),
    Column("reconcile_sources", ARRAY(Text), nullable=False),
    PrimaryKeyConstraint("name"),
)


class NotificationKind(StrEnum):
    """What a notification reports (SPEC "Notifications"); shared/notifications.py records
    each in the transaction of the change it reports."""

    JOB_FAILED = "job.failed"
    PROVIDER_FAILING = "provider.failing"
    PROVIDER_RECOVERED = "provider.recovered"
    EMAIL_FAILED = "email.failed"
    RECONCILE_FOUND = "reconcile.found"
    RECONCILE_FAILING = "reconcile.failing"
    DATABASE_FAILOVER = "database.failover"
    STRIPE_EVENT_GENERATION_FAILED = "stripe.event_generation_failed"
    AUDIT_VIOLATION = "audit.violation"
    CALL_FAILED = "call.failed"
    CALL_AMBIGUOUS = "call.ambiguous"


class NotificationStatus(StrEnum):
    """A notification's state, derived from its deliveries' (one per configured channel)::

        pending --(every delivery sent; or no channel configured, at once)--> sent
        pending --(a delivery failed: rejected, or its attempts exhausted)--> failed

    A notification is `sealed` by the dispatcher's first claim of one of its deliveries:
    from then on its count and details no longer change (a coalescing window's later
    occurrences go to a new notification), so every channel sends the same message.
    """

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class DeliveryStatus(StrEnum):
    """One channel's delivery of a notification; the transitions are the outbox's
    (EmailStatus): claimed with a lease and attempts + 1 before the HTTP call, then marked
    guarded by the claimed attempt::

        pending --(claim)--> in flight --(2xx)--> sent
        in flight --(a permanent refusal, or attempts exhausted)--> failed
        in flight --(5xx, 408, 429, timeout; attempts left)--> pending after backoff
        in flight --(dispatcher killed)--> pending again when the lease runs out
    """

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class Channel(StrEnum):
    """Where notifications go: each is on when its variable is set (NOTIFY_*)."""

    SLACK = "slack"
    EMAIL = "email"
    WEBHOOK = "webhook"


# One row per operational event worth telling a person about (shared/notifications.py).
# `id` is the generic webhook's `webhook-id` (stable across retries: receivers dedup on it).
notifications = Table(
    "notifications",
    metadata,
    Column("id", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("provider", Text),  # none for database.failover and audit.violation
    Column("source", Text),
    Column("count", Integer, nullable=False, server_default="1"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("status", Text, nullable=False, server_default=NotificationStatus.PENDING.value),
    Column("due_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    # Set by the dispatcher's claim: a sealed notification's count and details are final.
    Column("sealed", Boolean, nullable=False, server_default=text("false")),
    # The first error, up to a few sample ids, the console link: what a person needs.
    Column("details", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("sent_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("id"),
    CheckConstraint(one_of(NotificationKind, "kind"), name="kind"),
    CheckConstraint(one_of(NotificationStatus), name="status"),
    CheckConstraint("count >= 1", name="count"),
    # `webhooks notifications` and the console list them newest first.
    Index("ix_notifications_created_at_id", "created_at", "id"),
)

# One row per channel configured when the notification was recorded: the outbox of
# notifications (worker/notify.py), claimed and marked as worker/outbox.py does emails.
notification_deliveries = Table(
    "notification_deliveries",
    metadata,
    Column("notification_id", Text, nullable=False),
    Column("channel", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=DeliveryStatus.PENDING.value),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("run_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("last_error", Text),
    Column("sent_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("notification_id", "channel"),
    ForeignKeyConstraint(["notification_id"], ["notifications.id"], ondelete="CASCADE"),
    CheckConstraint(one_of(Channel, "channel"), name="channel"),
    CheckConstraint(one_of(DeliveryStatus), name="status"),
    # The dispatcher's claim, and the sweep's count of due deliveries.
    Index("ix_notification_deliveries_pending_run_at", "run_at",
          postgresql_where=text(f"status = '{DeliveryStatus.PENDING}'")),
)

# Coalescing (shared/notifications.py): per kind and source ('' for none), the window that
# the first notification opened, and the notification collecting the rest of it (tail_id).
notification_windows = Table(
    "notification_windows",
    metadata,
    Column("kind", Text, nullable=False),
    Column("provider", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("closes_at", DateTime(timezone=True), nullable=False),
    Column("tail_id", Text),
    PrimaryKeyConstraint("kind", "provider", "source"),
)

# Per source: failed job attempts in the current window, and whether the source is failing
# (provider.failing recorded, provider.recovered not yet). A partial index on the failing
# ones keeps a successful batch's look-up to an empty index when nothing fails.
notification_health = Table(
    "notification_health",
    metadata,
    Column("provider", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("window_started_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("failed_attempts", Integer, nullable=False, server_default="0"),
    Column("failing", Boolean, nullable=False, server_default=text("false")),
    PrimaryKeyConstraint("provider", "source"),
    Index("ix_notification_health_failing", "provider", "source",
          postgresql_where=text("failing")),
)
