"""partitioned events: webhook_events, jobs and event_search partitioned by day, the dedup
keys in webhook_dedup (kept DEDUP_HORIZON_DAYS, longer than the events)

Every step but one runs while the processes of the release before this one serve, and
they keep working on the new tables (docs/upgrading.md):

1. Expand, in one transaction of brief locks: the key functions, dedup_generations and
   webhook_dedup (its first generation), `dedup_key` on webhook_events, `received_at` on
   event_search (NOT NULL DEFAULT '-infinity': no rewrite, the old documents' value), and a
   trigger that copies the key of each event row inserted into webhook_dedup. The old
   unique indexes still decide what is a duplicate; webhook_dedup follows them.
2. Backfill (autocommit, BATCH rows a transaction): the keys of the events recorded before
   the trigger, by id.
3. The indexes the partitioned tables need, built CONCURRENTLY on the tables as they are
   (SHARE UPDATE EXCLUSIVE: writes go on), and CHECK constraints that bound their time
   columns below the switch time T (midnight UTC, two days ahead), added NOT VALID and
   VALIDATEd (a scan that blocks no reads nor writes).
4. Switch, one transaction holding ACCESS EXCLUSIVE on the three tables (and the
   duplicates') for its length, no row read or written in it: the tables are renamed
   `*_legacy`, the partitioned tables created under the old names, each old table attached
   as the partition of everything before T (its CHECK proves the bound: no scan; its
   indexes are the new ones: no build), the DEFAULT partitions and the days from T on
   created, and the trigger replaced by webhook_events_dedup_guard, which makes
   webhook_dedup the judge of a duplicate for any writer that does not insert its key
   itself (the old `web`). An empty old table (a new install) is dropped instead and the
   days start today. The foreign keys of jobs and webhook_duplicates on webhook_events go:
   a partitioned table's keys must hold its partition key, and retention drops whole days.

The `*_legacy` partitions go with retention, whole, once T is RETENTION_DAYS old
(shared/partitions.py), their unfinished rows moved to the DEFAULT partitions first.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 04:30:00.000000
"""

import time
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta

from alembic import context, op
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 10_000  # rows per backfill transaction; a test sets config.attributes["backfill_batch"]
SWITCH_AFTER_DAYS = 2  # T: the midnight (UTC) this many days ahead
DAYS_AHEAD = 7  # daily partitions created ahead (the clock keeps as many)
LOCK_TIMEOUT = "500ms"  # a step waits this long for its locks, then tries again
RETRIED = ("55P03", "40P01")  # lock_not_available (the timeout), deadlock_detected
SWITCH_ATTEMPTS = 120
# The providers whose senders' ids may collide: their dedup key holds the source
# (shared.providers.base.DedupScope.SOURCE; tests/integration/test_partitions.py ties them).
SOURCE_SCOPED = ("standard",)
PARTITIONED = {  # table: its partition key
    "webhook_events": "received_at",
    "jobs": "created_at",
    "event_search": "received_at",
}

KEY_FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION webhook_dedup_key(provider text, source text, event_id text)
RETURNS uuid LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN md5(provider || chr(31)
           || CASE WHEN provider IN ({', '.join(repr(p) for p in SOURCE_SCOPED)})
                   THEN source ELSE '' END
           || chr(31) || event_id)::uuid;

CREATE OR REPLACE FUNCTION webhook_body_key(provider text, event_type text, body_sha256 bytea)
RETURNS uuid LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN md5(provider || chr(31) || event_type || chr(31) || encode(body_sha256, 'hex'))::uuid;
"""

# Step 1's trigger: the old unique indexes decide; an inserted row's key is copied.
MIRROR = """
CREATE OR REPLACE FUNCTION webhook_events_dedup_mirror() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_dedup (generation, key, body_key, source, event_id, received_at)
    SELECT max(generation),
           webhook_dedup_key(NEW.provider, NEW.source, NEW.event_id),
           webhook_body_key(NEW.provider, NEW.event_type, NEW.body_sha256),
           NEW.source, NEW.event_id, NEW.received_at
    FROM dedup_generations
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER webhook_events_dedup_mirror AFTER INSERT ON webhook_events
    FOR EACH ROW EXECUTE FUNCTION webhook_events_dedup_mirror();
"""

# Step 4's trigger, for good: an event row inserted without its key (by a writer that does
# not insert it into webhook_dedup itself, as queries.EventJobInsert does) inserts it here,
# and is skipped, as ON CONFLICT DO NOTHING would skip it, when the key is taken: in this
# generation (the unique indexes, waiting for a concurrent insert of the same key) or an
# older one. Rows with a key, and the old table's rows (an id up to its last: their keys
# are in the table already) moved between partitions, by retention or by an UPDATE of
# their time, pass as they are.
GUARD = """
CREATE OR REPLACE FUNCTION webhook_events_dedup_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    current integer;
    new_key uuid := webhook_dedup_key(NEW.provider, NEW.source, NEW.event_id);
    new_body_key uuid := webhook_body_key(NEW.provider, NEW.event_type, NEW.body_sha256);
BEGIN
    SELECT max(generation) INTO current FROM dedup_generations;
    INSERT INTO webhook_dedup (generation, key, body_key, source, event_id, received_at)
    SELECT current, new_key, new_body_key, NEW.source, NEW.event_id, NEW.received_at
    WHERE NOT EXISTS (SELECT FROM webhook_dedup d
                      WHERE d.key = new_key AND d.generation < current)
      AND NOT EXISTS (SELECT FROM webhook_dedup d
                      WHERE d.body_key = new_body_key AND d.generation < current)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    NEW.dedup_key := new_key;
    RETURN NEW;
END $$;
"""
GUARD_TRIGGER = """
CREATE TRIGGER webhook_events_dedup_guard BEFORE INSERT ON webhook_events
    FOR EACH ROW WHEN (NEW.dedup_key IS NULL AND NEW.id > {last_id})
    EXECUTE FUNCTION webhook_events_dedup_guard();
"""

# An event's day is its job's and its search document's (the partition they are in, which
# the joins name): an UPDATE of one's time (an operator's, a test's) moves the others with
# it. BEFORE UPDATE: the only row trigger that fires when the row moves to another
# partition; pg_trigger_depth() = 0: not for the updates these triggers make themselves.
SAME_DAY = """
CREATE FUNCTION webhook_events_same_day() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET created_at = NEW.received_at
    WHERE provider = OLD.provider AND source = OLD.source AND event_id = OLD.event_id
      AND created_at = OLD.received_at;
    UPDATE event_search SET received_at = NEW.received_at
    WHERE provider = OLD.provider AND source = OLD.source AND event_id = OLD.event_id
      AND received_at = OLD.received_at;
    RETURN NEW;
END $$;
CREATE TRIGGER webhook_events_same_day BEFORE UPDATE OF received_at ON webhook_events
    FOR EACH ROW WHEN (OLD.received_at IS DISTINCT FROM NEW.received_at
                       AND pg_trigger_depth() = 0)
    EXECUTE FUNCTION webhook_events_same_day();
CREATE FUNCTION jobs_same_day() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE webhook_events SET received_at = NEW.created_at
    WHERE provider = OLD.provider AND source = OLD.source AND event_id = OLD.event_id
      AND received_at = OLD.created_at;
    UPDATE event_search SET received_at = NEW.created_at
    WHERE provider = OLD.provider AND source = OLD.source AND event_id = OLD.event_id
      AND received_at = OLD.created_at;
    RETURN NEW;
END $$;
CREATE TRIGGER jobs_same_day BEFORE UPDATE OF created_at ON jobs
    FOR EACH ROW WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at
                       AND pg_trigger_depth() = 0)
    EXECUTE FUNCTION jobs_same_day();
"""

# (table, index, definition): built CONCURRENTLY on the old tables in step 3, each the
# partition of an index of the partitioned table in step 4. The old tables' other indexes
# that the partitioned tables have too (the same columns and predicates) are attached as
# they are.
LEGACY_INDEXES = (
    ("webhook_events", "legacy_webhook_events_id_received_at",
     "UNIQUE INDEX {name} ON webhook_events (id, received_at)"),
    ("webhook_events", "legacy_webhook_events_provider_source_event_id_received_at",
     "UNIQUE INDEX {name} ON webhook_events (provider, source, event_id, received_at)"),
    ("webhook_events", "legacy_webhook_events_provider_event_id",
     "INDEX {name} ON webhook_events (provider, event_id)"),
    ("jobs", "legacy_jobs_id_created_at", "UNIQUE INDEX {name} ON jobs (id, created_at)"),
    ("jobs", "legacy_jobs_provider_source_event_id_created_at",
     "UNIQUE INDEX {name} ON jobs (provider, source, event_id, created_at)"),
    ("event_search", "legacy_event_search_provider_source_event_id_received_at",
     "UNIQUE INDEX {name} ON event_search (provider, source, event_id, received_at)"),
)
# The new primary keys of the old tables, from the indexes above.
LEGACY_PRIMARY_KEYS = {
    "webhook_events": "legacy_webhook_events_id_received_at",
    "jobs": "legacy_jobs_id_created_at",
    "event_search": "legacy_event_search_provider_source_event_id_received_at",
}
BOUND_CHECK = "legacy_bound"  # the CHECK that proves an old table's partition bound

ID_TABLES = ("webhook_events", "jobs")  # their ids come from an identity
SEARCH_PENDING_LIST_KB = 65_536
PARENTS = f"""
CREATE TABLE webhook_events (
    id bigint GENERATED BY DEFAULT AS IDENTITY NOT NULL,
    provider text NOT NULL,
    source text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    received_via text DEFAULT 'delivery' NOT NULL,
    body_sha256 bytea,
    account text,
    livemode boolean,
    dedup_key uuid,
    CONSTRAINT pk_webhook_events PRIMARY KEY (id, received_at),
    CONSTRAINT ck_webhook_events_received_via
        CHECK (received_via IN ('delivery', 'reconcile'))
) PARTITION BY RANGE (received_at);
CREATE UNIQUE INDEX ux_webhook_events_provider_source_event_id_received_at
    ON webhook_events (provider, source, event_id, received_at);
CREATE INDEX ix_webhook_events_provider_event_id ON webhook_events (provider, event_id);
CREATE INDEX ix_webhook_events_reconciled ON webhook_events (provider)
    WHERE received_via = 'reconcile';
CREATE INDEX ix_webhook_events_account ON webhook_events (provider, source, account)
    WHERE account IS NOT NULL;
CREATE INDEX ix_webhook_events_received_at_id ON webhook_events (received_at, id);
CREATE STATISTICS st_webhook_events_provider_source (mcv)
    ON provider, source FROM webhook_events;

CREATE TABLE jobs (
    id bigint GENERATED BY DEFAULT AS IDENTITY NOT NULL,
    provider text NOT NULL,
    source text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    status text DEFAULT 'pending' NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    last_error text,
    outcome text,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    trace_context text,
    held boolean DEFAULT false NOT NULL,
    CONSTRAINT pk_jobs PRIMARY KEY (id, created_at),
    CONSTRAINT ck_jobs_status CHECK (status IN ('pending', 'done', 'failed')),
    CONSTRAINT ck_jobs_attempts CHECK (attempts >= 0)
) PARTITION BY RANGE (created_at);
CREATE INDEX ix_jobs_pending_held_run_at_id ON jobs (held, run_at, id)
    WHERE status = 'pending';
CREATE INDEX ix_jobs_status_finished_at ON jobs (status, finished_at);
CREATE UNIQUE INDEX ux_jobs_provider_source_event_id_created_at
    ON jobs (provider, source, event_id, created_at);
CREATE STATISTICS st_jobs_provider_source (mcv) ON provider, source FROM jobs;

CREATE TABLE event_search (
    provider text NOT NULL,
    source text NOT NULL,
    event_id text NOT NULL,
    document tsvector NOT NULL,
    received_at timestamp with time zone DEFAULT '-infinity'::timestamp with time zone
        NOT NULL,
    CONSTRAINT pk_event_search PRIMARY KEY (provider, source, event_id, received_at)
) PARTITION BY RANGE (received_at);
CREATE INDEX ix_event_search_document ON event_search USING gin (document)
    WITH (gin_pending_list_limit = {SEARCH_PENDING_LIST_KB});
"""


EXPAND = """
CREATE TABLE IF NOT EXISTS dedup_generations (
    generation integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT pk_dedup_generations PRIMARY KEY (generation)
);
INSERT INTO dedup_generations (generation) VALUES (1) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS webhook_dedup (
    generation integer NOT NULL,
    key uuid NOT NULL,
    body_key uuid,
    source text NOT NULL,
    event_id text NOT NULL,
    received_at timestamp with time zone NOT NULL
) PARTITION BY LIST (generation);
CREATE UNIQUE INDEX IF NOT EXISTS ux_webhook_dedup_key_generation
    ON webhook_dedup (key, generation);
CREATE UNIQUE INDEX IF NOT EXISTS ux_webhook_dedup_body_key_generation
    ON webhook_dedup (body_key, generation) WHERE body_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS webhook_dedup_g1 PARTITION OF webhook_dedup FOR VALUES IN (1);
ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS dedup_key uuid;
ALTER TABLE event_search ADD COLUMN IF NOT EXISTS received_at timestamp with time zone
    DEFAULT '-infinity'::timestamp with time zone NOT NULL;
"""
MIGRATE_LOCK = "hashtext('webhooks:migrate')"  # alembic/env.py's


def upgrade() -> None:
    """Safe to run again after a failure at any step: each creates what is missing."""
    batch = context.config.attributes.get("backfill_batch", BATCH)
    today = datetime.now(UTC).date()
    switch_at = _midnight(today + timedelta(days=SWITCH_AFTER_DAYS))
    bind = op.get_bind()
    # env.py's lock ends with the transaction the steps below commit: a session's keeps a
    # second `release` out until the switch's transaction takes the lock again.
    bind.execute(text(f"SELECT pg_advisory_lock({MIGRATE_LOCK})"))
    # 1. Expand.
    _with_lock_timeout(lambda: (bind.execute(text(KEY_FUNCTIONS)), bind.execute(text(EXPAND)),
                                bind.execute(text(MIRROR))), savepoint=True)
    with op.get_context().autocommit_block():
        # 2. Backfill.
        _backfill_keys(batch)
        # 3. Indexes and bounds.
        for _table, name, definition in LEGACY_INDEXES:
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")  # a failed earlier run's
            op.execute(f"CREATE {definition.format(name=f'CONCURRENTLY {name}')}")
        for table, column in PARTITIONED.items():
            _with_lock_timeout(lambda t=table, c=column: (  # type: ignore[misc]
                bind.execute(text(f"ALTER TABLE {t} DROP CONSTRAINT IF EXISTS {BOUND_CHECK}")),
                bind.execute(text(f"ALTER TABLE {t} ADD CONSTRAINT {BOUND_CHECK} "
                                  f"CHECK ({c} < '{switch_at.isoformat()}') NOT VALID"))))
            op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {BOUND_CHECK}")
    # 4. Switch, in the migration's own transaction (committed with its version).
    bind.execute(text(f"SELECT pg_advisory_xact_lock({MIGRATE_LOCK})"))
    bind.execute(text(f"SELECT pg_advisory_unlock({MIGRATE_LOCK})"))
    _with_lock_timeout(lambda: _switch(switch_at, today), savepoint=True)


def _with_lock_timeout(step: Callable[[], object], savepoint: bool = False) -> None:
    """`step` waiting at most LOCK_TIMEOUT for its locks, tried again until it gets them.
    The ingest queues behind a waiting ACCESS EXCLUSIVE request, and a delivery's
    statement may hold one of the tables a step locks while it waits for another (a
    prepared statement locks in another order than the same statement planned anew):
    LOCK_TIMEOUT is below Postgres's deadlock_timeout, so the step gives its locks up before
    a delivery waiting on it would be checked for a deadlock and ended. In a transaction,
    each attempt is a savepoint, so that a failed one gives its locks up; in autocommit,
    each statement is its own transaction already."""
    bind = op.get_bind()
    for attempt in range(SWITCH_ATTEMPTS):
        try:
            if savepoint:
                with bind.begin_nested():
                    bind.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
                    step()
            else:
                bind.execute(text(f"SET lock_timeout = '{LOCK_TIMEOUT}'"))
                try:
                    step()
                finally:
                    bind.execute(text("SET lock_timeout = 0"))
            break
        except DBAPIError as error:
            retry = getattr(error.orig, "sqlstate", None) in RETRIED
            if not retry or attempt == SWITCH_ATTEMPTS - 1:
                raise
            time.sleep(min(0.1 * 2 ** attempt, 5))
    if savepoint:
        bind.execute(text("SET LOCAL lock_timeout = 0"))


def _backfill_keys(batch: int) -> None:
    bind = op.get_bind()
    last = bind.execute(text("SELECT coalesce(max(id), 0) FROM webhook_events")).scalar_one()
    after = 0
    while after < last:
        bind.execute(text("""
            INSERT INTO webhook_dedup (generation, key, body_key, source, event_id, received_at)
            SELECT 1, webhook_dedup_key(provider, source, event_id),
                   webhook_body_key(provider, event_type, body_sha256),
                   source, event_id, received_at
            FROM webhook_events WHERE id > :after AND id <= :until
            ON CONFLICT DO NOTHING
        """), {"after": after, "until": after + batch})
        after += batch


def _switch(switch_at: datetime, today: date) -> None:
    bind = op.get_bind()
    bind.execute(text("LOCK TABLE webhook_events, jobs, event_search, webhook_duplicates "
                      "IN ACCESS EXCLUSIVE MODE"))
    now = bind.execute(text("SELECT now()")).scalar_one()
    if now > switch_at - timedelta(hours=1):
        # The bound CHECKs refuse rows from T on: the switch must come well before it.
        raise RuntimeError(f"migration 0023 reached its switch too late ({now} for "
                           f"{switch_at}): run it again")
    for table in ("jobs", "webhook_duplicates"):
        for (name,) in bind.execute(text(
                "SELECT conname FROM pg_constraint WHERE contype = 'f' "
                "AND conrelid = CAST(:table AS regclass) "
                "AND confrelid = CAST('webhook_events' AS regclass)"), {"table": table}).all():
            bind.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"'))
    bind.execute(text("DROP TRIGGER webhook_events_dedup_mirror ON webhook_events"))
    bind.execute(text("DROP FUNCTION webhook_events_dedup_mirror()"))
    kept, last_ids = {}, {}
    for table in PARTITIONED:
        legacy = f"{table}_legacy"
        bind.execute(text(f"ALTER TABLE {table} RENAME TO {legacy}"))
        kept[table] = bind.execute(text(f"SELECT EXISTS (SELECT FROM {legacy})")).scalar_one()
        if not kept[table]:
            bind.execute(text(f"DROP TABLE {legacy}"))
            continue
        sequence = None if table not in ID_TABLES else bind.execute(text(
            "SELECT pg_get_serial_sequence(:t, 'id')"), {"t": legacy}).scalar_one_or_none()
        if sequence is not None:
            # New ids continue after the old ones (messages and logs name jobs by id).
            last_ids[table] = bind.execute(text(
                f"SELECT last_value FROM {sequence}")).scalar_one()
            bind.execute(text(f"ALTER TABLE {legacy} ALTER COLUMN id DROP IDENTITY"))
        _rename_legacy_objects(legacy)
    bind.execute(text(PARENTS))
    bind.execute(text(GUARD))
    bind.execute(text(GUARD_TRIGGER.format(last_id=last_ids.get("webhook_events", 0))))
    bind.execute(text(SAME_DAY))
    for table, last_id in last_ids.items():
        bind.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), :id)"),
                     {"id": last_id})
    for table in PARTITIONED:
        legacy = f"{table}_legacy"
        if kept[table]:
            bind.execute(text(f"ALTER TABLE {legacy} ADD CONSTRAINT {legacy}_pkey "
                              f"PRIMARY KEY USING INDEX {LEGACY_PRIMARY_KEYS[table]}"))
            bind.execute(text(f"ALTER TABLE {table} ATTACH PARTITION {legacy} "
                              f"FOR VALUES FROM (MINVALUE) TO ('{switch_at.isoformat()}')"))
            bind.execute(text(f"ALTER TABLE {legacy} DROP CONSTRAINT {BOUND_CHECK}"))
        bind.execute(text(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT"))
        day = switch_at.date() if kept[table] else today
        while day <= today + timedelta(days=DAYS_AHEAD):
            bind.execute(text(
                f"CREATE TABLE {table}_p{day:%Y%m%d} PARTITION OF {table} FOR VALUES "
                f"FROM ('{_midnight(day).isoformat()}') "
                f"TO ('{_midnight(day + timedelta(days=1)).isoformat()}')"))
            day += timedelta(days=1)


def _rename_legacy_objects(legacy: str) -> None:
    """The old table's indexes take names of their own (its primary key goes: the new one
    is built already), and its statistics go, so that the partitioned table can take the
    old names."""
    bind = op.get_bind()
    for name, constraint, kind in bind.execute(text("""
            SELECT i.relname, c.conname, c.contype FROM pg_index x
            JOIN pg_class i ON i.oid = x.indexrelid
            LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid
                                     AND c.conrelid = x.indrelid
            WHERE x.indrelid = CAST(:legacy AS regclass)"""), {"legacy": legacy}).all():
        if kind == "p":
            bind.execute(text(f'ALTER TABLE {legacy} DROP CONSTRAINT "{constraint}"'))
        elif name.startswith("legacy_"):
            continue
        elif constraint is not None:
            bind.execute(text(f'ALTER TABLE {legacy} RENAME CONSTRAINT "{constraint}" '
                              f'TO "{f"legacy_{name}"[:63]}"'))
        else:
            bind.execute(text(f'ALTER INDEX "{name}" RENAME TO "{f"legacy_{name}"[:63]}"'))
    for (name,) in bind.execute(text(
            "SELECT stxname FROM pg_statistic_ext WHERE stxrelid = CAST(:legacy AS regclass)"),
            {"legacy": legacy}).all():
        bind.execute(text(f'DROP STATISTICS "{name}"'))


def _midnight(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), tzinfo=UTC)


def downgrade() -> None:
    raise NotImplementedError("0023 is not reversible: restore a backup taken before it")
