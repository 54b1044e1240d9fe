"""Events, jobs and search documents partitioned by day; retention by whole days with the
unfinished rows kept; dedup keys that outlive the events, in generations (SPEC "Growth:
cost flat as history grows"; shared/partitions.py)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories
from tests.conftest import STRIPE_SECRET
from webhooks.shared import db, partitions, queries, reconciliation
from webhooks.shared.recording import Origin, record_event
from webhooks.shared.settings import Settings

OLD_DAY = (datetime.now(UTC) - timedelta(days=45)).date()


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar_one()


def rows(engine: Engine, sql: str, **params: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(sql), params).all())


@pytest.fixture()
def recording(settings: Settings) -> Any:
    engine = db.create_engine(settings, pool_size=20, autocommit=True)
    yield engine
    engine.dispose()


@pytest.fixture()
def old_day(clean_db: Engine) -> Any:
    """A day's partitions 45 days back (a day whose events retention drops), removed after
    the test if retention did not."""
    with clean_db.begin() as conn:
        for table, key in partitions.TABLES:
            partitions._create_day(conn, table.name, key, OLD_DAY)
    yield OLD_DAY
    with clean_db.begin() as conn:
        for table, _key in partitions.TABLES:
            conn.execute(sa.text(
                f"DROP TABLE IF EXISTS {partitions.day_partition(table.name, OLD_DAY)}"))


def deliver(recording: Engine, event: dict[str, Any], source: str | None = None) -> Any:
    return record_event(recording, "stripe", event["id"], event["type"],
                        json.dumps(event).encode(), origin=Origin(source=source))


def age(engine: Engine, event_id: str, when: datetime) -> None:
    """Move an event to another day: its job and document move with it (the same-day
    triggers)."""
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE webhook_events SET received_at = :when "
                             "WHERE event_id = :id"), {"when": when, "id": event_id})


def partition_of(engine: Engine, table: str, event_id: str) -> str:
    return str(scalar(engine, f"SELECT tableoid::regclass::text FROM {table} "
                              "WHERE event_id = :id", id=event_id))


def test_an_event_its_job_and_its_document_are_in_the_same_days_partitions(
        clean_db: Engine, recording: Engine) -> None:
    event = factories.stripe_event("invoice.paid", factories.invoice())
    result = deliver(recording, event)
    today = datetime.now(UTC).date()
    assert partition_of(clean_db, "webhook_events", event["id"]) == \
        partitions.day_partition("webhook_events", today)
    assert partition_of(clean_db, "jobs", event["id"]) == partitions.day_partition("jobs", today)
    created, received = rows(clean_db, """
        SELECT j.created_at, e.received_at FROM jobs j JOIN webhook_events e USING (event_id)
        WHERE j.id = :id""", id=result.job_id)[0]
    assert created == received
    assert scalar(clean_db, "SELECT count(*) FROM webhook_dedup WHERE event_id = :id",
                  id=event["id"]) == 1


def test_moving_an_events_time_moves_its_job_and_document(clean_db: Engine,
                                                           old_day: Any) -> None:
    event = factories.stripe_event("invoice.paid", factories.invoice())
    factories.insert_event_and_job(clean_db, event, status="done")
    age(clean_db, event["id"], partitions.midnight(old_day) + timedelta(hours=3))
    for table in ("webhook_events", "jobs", "event_search"):
        assert partition_of(clean_db, table, event["id"]) == \
            partitions.day_partition(table, old_day)


def test_prune_drops_whole_days_and_keeps_unfinished_work(clean_db: Engine,
                                                          old_day: Any) -> None:
    """A day past RETENTION_DAYS goes whole: its done events with it, its pending and
    failed jobs (and their events and documents) kept in the DEFAULT partitions, where an
    operator can still replay them; a recent day is untouched."""
    when = partitions.midnight(old_day) + timedelta(hours=6)
    ids: dict[str, list[str]] = {"done": [], "pending": [], "failed": []}
    for status, count in (("done", 40), ("pending", 2), ("failed", 3)):
        for _ in range(count):
            event = factories.stripe_event("invoice.paid", factories.invoice())
            factories.insert_event_and_job(clean_db, event, status=status,
                                           **({"attempts": 8} if status == "failed" else {}))
            age(clean_db, event["id"], when)
            ids[status].append(event["id"])
    recent = factories.stripe_event("invoice.paid", factories.invoice())
    factories.insert_event_and_job(clean_db, recent, status="done")

    pruned = partitions.prune(clean_db, days=30, horizon_days=90)

    assert pruned.events == 40 and pruned.kept == 5 and pruned.partitions == 3
    assert not rows(clean_db, "SELECT relname FROM pg_class WHERE relname LIKE :name",
                    name=f"%_p{old_day:%Y%m%d}")
    kept = ids["pending"] + ids["failed"]
    assert sorted(r[0] for r in rows(clean_db, "SELECT event_id FROM webhook_events_default")) \
        == sorted(kept)
    assert sorted(r[0] for r in rows(clean_db, "SELECT event_id FROM jobs_default")) \
        == sorted(kept)
    assert sorted(r[0] for r in rows(clean_db, "SELECT event_id FROM event_search_default")) \
        == sorted(ids["failed"])  # a pending job has not run: no document yet
    assert scalar(clean_db, "SELECT count(*) FROM webhook_events") == len(kept) + 1
    # The kept jobs are whole: status, attempts, their events' payloads.
    assert scalar(clean_db, "SELECT count(*) FROM jobs WHERE status = 'failed' "
                            "AND attempts = 8") == 3
    assert scalar(clean_db, """
        SELECT count(*) FROM jobs j JOIN webhook_events e ON e.provider = j.provider
        AND e.source = j.source AND e.event_id = j.event_id AND e.received_at = j.created_at
        WHERE e.payload ? 'id'""") == len(kept) + 1
    # Their keys stay: a redelivery of a dropped event is a duplicate.
    assert scalar(clean_db, "SELECT count(*) FROM webhook_dedup") == 46


def test_the_prune_of_a_day_writes_wal_that_does_not_grow_with_its_events(
        clean_db: Engine, old_day: Any) -> None:
    """Dropping a day writes the catalogs' changes, not one record per row: the WAL of a
    prune of 20,000 events is a fraction of what deleting them row by row writes."""
    when = partitions.midnight(old_day) + timedelta(hours=1)
    with clean_db.begin() as conn:
        conn.execute(sa.text("""
            WITH e AS (
                INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                            received_at, dedup_key)
                SELECT 'stripe', 'stripe', 'evt_wal_' || n, 'invoice.paid',
                       jsonb_build_object('id', 'evt_wal_' || n), :when, gen_random_uuid()
                FROM generate_series(1, 20000) AS n
                RETURNING provider, source, event_id, event_type, received_at
            )
            INSERT INTO jobs (provider, source, event_id, event_type, status, created_at,
                              finished_at)
            SELECT provider, source, event_id, event_type, 'done', received_at, received_at
            FROM e"""), {"when": when})
    with clean_db.connect() as conn:
        conn.execute(sa.text("CHECKPOINT"))
        before = conn.execute(sa.text("SELECT pg_current_wal_lsn()")).scalar_one()
    pruned = partitions.prune(clean_db, days=30, horizon_days=90)
    with clean_db.connect() as conn:
        written = conn.execute(sa.text("SELECT pg_current_wal_lsn() - CAST(:before AS pg_lsn)"),
                               {"before": before}).scalar_one()
    assert pruned.events == 20_000
    # Row by row, each event's row and its job's take a delete record of about 50 bytes
    # each (and full-page images after the checkpoint): 2,000,000 bytes at the least.
    assert written < 1_000_000, f"{written} bytes of WAL for a prune of 20,000 events"


def test_a_kept_job_finished_later_is_pruned_from_the_default_partition(
        clean_db: Engine, old_day: Any) -> None:
    event = factories.stripe_event("invoice.paid", factories.invoice())
    job_id = factories.insert_event_and_job(clean_db, event, status="failed", attempts=8)
    age(clean_db, event["id"], partitions.midnight(old_day))
    assert partitions.prune(clean_db, days=30, horizon_days=90).kept == 1
    with clean_db.begin() as conn:  # replayed and done, long ago (as an operator would find)
        conn.execute(sa.text("UPDATE jobs SET status = 'done', finished_at = now() - "
                             "interval '31 days' WHERE id = :id"), {"id": job_id})
    assert partitions.prune(clean_db, days=30, horizon_days=90).events == 1
    assert scalar(clean_db, "SELECT count(*) FROM webhook_events") == 0
    assert scalar(clean_db, "SELECT count(*) FROM jobs") == 0


def test_a_redelivery_of_a_pruned_event_is_a_duplicate(settings: Settings, clean_db: Engine,
                                                       old_day: Any) -> None:
    from webhooks.ingest.app import create_app

    client = create_app(settings).test_client()
    event = factories.stripe_event("invoice.paid", factories.invoice())
    body = json.dumps(event).encode()

    def post() -> Any:
        return client.post("/webhooks/stripe", data=body, headers={
            "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})

    assert post().json["duplicate"] is False
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'done', finished_at = now()"))
    age(clean_db, event["id"], partitions.midnight(old_day) + timedelta(hours=2))
    assert partitions.prune(clean_db, days=30, horizon_days=90).events == 1
    assert scalar(clean_db, "SELECT count(*) FROM webhook_events") == 0

    answer = post()
    assert answer.status_code == 200
    assert answer.json == {"event_id": event["id"], "duplicate": True, "status": "done"}
    assert scalar(clean_db, "SELECT count(*) FROM jobs") == 0
    assert scalar(clean_db, "SELECT count(*) FROM webhook_duplicates") == 1


def test_reconciliation_counts_a_pruned_event_as_recorded(clean_db: Engine, recording: Engine,
                                                          old_day: Any) -> None:
    event = factories.stripe_event("invoice.paid", factories.invoice())
    deliver(recording, event)
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'done', finished_at = now()"))
    age(clean_db, event["id"], partitions.midnight(old_day))
    partitions.prune(clean_db, days=30, horizon_days=90)
    assert reconciliation._recorded(clean_db, "stripe", "stripe", [event["id"], "evt_never"]) \
        == {event["id"]}


def start_generation(engine: Engine, days_ago: float) -> int:
    """Age the current generation, then start the next (as the clock does)."""
    with engine.begin() as conn:
        conn.execute(sa.text("""
            UPDATE dedup_generations SET started_at = now() - make_interval(secs => :s)
            WHERE generation = (SELECT max(generation) FROM dedup_generations)"""),
            {"s": days_ago * 86400})
    with engine.begin() as conn:
        assert partitions._rotate_generation(conn, horizon_days=90)
    return int(scalar(engine, "SELECT max(generation) FROM dedup_generations"))


@pytest.fixture()
def generations(clean_db: Engine) -> Any:
    """Generations started by the test are dropped after it: the next test starts with
    generation 1 only, as a migrated database does."""
    yield
    with clean_db.begin() as conn:
        for (generation,) in conn.execute(sa.text(
                "SELECT generation FROM dedup_generations WHERE generation > 1")).all():
            conn.execute(sa.text(f"DROP TABLE IF EXISTS webhook_dedup_g{generation}"))
        conn.execute(sa.text("DELETE FROM dedup_generations WHERE generation > 1"))
        conn.execute(sa.text("""
            INSERT INTO dedup_generations (generation) VALUES (1) ON CONFLICT DO NOTHING"""))
        conn.execute(sa.text("UPDATE dedup_generations SET started_at = now()"))
        if not conn.execute(sa.text("SELECT to_regclass('webhook_dedup_g1')")).scalar():
            conn.execute(sa.text(
                "CREATE TABLE webhook_dedup_g1 PARTITION OF webhook_dedup FOR VALUES IN (1)"))


def test_a_key_in_an_older_generation_is_a_duplicate(clean_db: Engine, recording: Engine,
                                                     generations: Any) -> None:
    first = factories.stripe_event("invoice.paid", factories.invoice())
    assert not deliver(recording, first).duplicate
    generation = start_generation(clean_db, days_ago=31)
    assert generation == 2
    again = deliver(recording, first)
    assert again.duplicate and again.status == "pending"
    second = factories.stripe_event("invoice.paid", factories.invoice())
    assert not deliver(recording, second).duplicate
    assert rows(clean_db, "SELECT generation, event_id FROM webhook_dedup ORDER BY generation") \
        == [(1, first["id"]), (2, second["id"])]
    assert scalar(clean_db, "SELECT count(*) FROM jobs") == 2


def test_a_body_recorded_in_an_older_generation_is_a_duplicate_under_a_new_id(
        clean_db: Engine, recording: Engine, generations: Any) -> None:
    body = json.dumps({"action": "opened", "issue": {"id": 7}}).encode()
    assert not record_event(recording, "github", "guid-1", "issues", body).duplicate
    start_generation(clean_db, days_ago=31)
    resent = record_event(recording, "github", "guid-2", "issues", body)
    assert resent.duplicate and resent.event_id == "guid-1"
    assert not record_event(recording, "github", "guid-3", "pull_request", body).duplicate


def test_a_generation_past_the_horizon_goes_whole_and_kept_events_keep_their_keys(
        clean_db: Engine, recording: Engine, generations: Any) -> None:
    done = factories.stripe_event("invoice.paid", factories.invoice())
    failed = factories.stripe_event("invoice.paid", factories.invoice())
    deliver(recording, done)
    deliver(recording, failed)
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'done', finished_at = now() - "
                             "interval '99 days' WHERE event_id = :id"), {"id": done["id"]})
        conn.execute(sa.text("UPDATE jobs SET status = 'failed', finished_at = now() - "
                             "interval '99 days' WHERE event_id = :id"), {"id": failed["id"]})
    for event in (done, failed):  # no day's partition that old: both in DEFAULT
        age(clean_db, event["id"], datetime.now(UTC) - timedelta(days=100))
    start_generation(clean_db, days_ago=130)  # generation 1 from 130 days ago to 91
    start_generation(clean_db, days_ago=91)  # generation 2 from 91 days ago to now

    pruned = partitions.prune(clean_db, days=30, horizon_days=90)

    assert pruned.generations == 1 and pruned.events == 1
    assert rows(clean_db, "SELECT generation FROM dedup_generations ORDER BY 1") == [(2,), (3,)]
    # The failed event is still stored (an operator may replay it): its key is carried into
    # the current generation, so its redelivery is still a duplicate. The done one's went
    # with the horizon: a delivery of it now is a new event, as the horizon says.
    assert rows(clean_db, "SELECT generation, event_id FROM webhook_dedup") == [(3, failed["id"])]
    assert deliver(recording, failed).duplicate
    assert not deliver(recording, done).duplicate


def test_deliveries_racing_a_new_generation_record_one_event(
        clean_db: Engine, recording: Engine, generations: Any) -> None:
    """Twenty connections deliver the same events while the clock starts a generation: the
    generation waits for the inserts in flight and holds the next until it commits, so each
    event is recorded once, whichever generation each delivery checked."""
    events = [factories.stripe_event("invoice.paid", factories.invoice()) for _ in range(30)]
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE dedup_generations SET started_at = now() - "
                             "interval '31 days'"))
    go = threading.Barrier(21)
    errors: list[BaseException] = []

    def delivering() -> None:
        go.wait()
        try:
            for event in events:
                deliver(recording, event)
        except BaseException as error:
            errors.append(error)

    def rotating() -> None:
        go.wait()
        with clean_db.begin() as conn:
            partitions._rotate_generation(conn, horizon_days=90)

    threads = [threading.Thread(target=delivering) for _ in range(20)]
    threads.append(threading.Thread(target=rotating))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert scalar(clean_db, "SELECT max(generation) FROM dedup_generations") == 2
    assert scalar(clean_db, "SELECT count(*) FROM webhook_events") == 30
    assert scalar(clean_db, "SELECT count(*) FROM jobs") == 30
    assert scalar(clean_db, "SELECT count(DISTINCT key) FROM webhook_dedup") == 30


PREVIOUS_RELEASE_INSERT = """
    WITH event AS (
        INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                    received_via, body_sha256, account, livemode)
        VALUES (:provider, :source, :event_id, :event_type, CAST(:payload AS jsonb),
                'delivery', NULL, NULL, NULL)
        ON CONFLICT DO NOTHING
        RETURNING provider, source, event_id, event_type
    )
    INSERT INTO jobs (provider, source, event_id, event_type, trace_context, held)
    SELECT provider, source, event_id, event_type, NULL, false FROM event
    RETURNING id, status
"""


def test_a_writer_that_does_not_know_the_dedup_table_is_deduplicated_by_the_guard(
        clean_db: Engine, recording: Engine) -> None:
    """The previous release's ingest statement (an old `web` still serving during an
    upgrade) inserts into webhook_events with no key: the guard trigger inserts it, so a
    second delivery from two connections at once, and one the new statement recorded, are
    duplicates (no row)."""
    event = factories.stripe_event("invoice.paid", factories.invoice())
    params = {"provider": "stripe", "source": "stripe", "event_id": event["id"],
              "event_type": "invoice.paid", "payload": json.dumps(event)}
    go = threading.Barrier(10)
    inserted: list[int] = []

    def old_web() -> None:
        go.wait()
        with recording.connect() as conn:
            inserted.extend(conn.execute(sa.text(PREVIOUS_RELEASE_INSERT), params).scalars())

    threads = [threading.Thread(target=old_web) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(inserted) == 1
    assert deliver(recording, event).duplicate  # the new statement sees the old one's key
    newer = factories.stripe_event("invoice.paid", factories.invoice())
    deliver(recording, newer)
    with recording.connect() as conn:  # and the old statement sees the new one's
        assert not conn.execute(sa.text(PREVIOUS_RELEASE_INSERT), {
            **params, "event_id": newer["id"], "payload": json.dumps(newer)}).all()
    assert scalar(clean_db, "SELECT count(*) FROM webhook_events") == 2


def test_maintenance_creates_the_days_ahead_and_moves_rows_a_missing_day_left_in_default(
        clean_db: Engine, recording: Engine) -> None:
    """A clock down long enough that a day had no partition: its rows went to DEFAULT (the
    ingest never fails for it); the next maintenance creates the day and moves them in.
    It creates nothing for a day gone."""
    ahead = datetime.now(UTC).date() + timedelta(days=partitions.DAYS_AHEAD + 1)
    when = partitions.midnight(ahead) + timedelta(hours=5)
    event = factories.stripe_event("invoice.paid", factories.invoice())
    factories.insert_event_and_job(clean_db, event, status="done")
    age(clean_db, event["id"], when)
    assert partition_of(clean_db, "webhook_events", event["id"]) == "webhook_events_default"
    try:
        created = partitions.maintain(clean_db, horizon_days=90,
                                      days_ahead=partitions.DAYS_AHEAD + 1)
        assert partitions.day_partition("webhook_events", ahead) in created
        for table in ("webhook_events", "jobs", "event_search"):
            assert partition_of(clean_db, table, event["id"]) == \
                partitions.day_partition(table, ahead)
        assert not partitions.maintain(clean_db, horizon_days=90)  # nothing left to create
        yesterday = datetime.now(UTC).date() - timedelta(days=1)
        assert not rows(clean_db, "SELECT relname FROM pg_class WHERE relname = :name",
                        name=partitions.day_partition("webhook_events", yesterday))
    finally:
        with clean_db.begin() as conn:
            conn.execute(sa.text("TRUNCATE webhook_events, jobs, event_search"))
            for table, _key in partitions.TABLES:
                conn.execute(sa.text(
                    f"DROP TABLE IF EXISTS {partitions.day_partition(table.name, ahead)}"))


def test_the_claim_and_marks_name_the_partition(clean_db: Engine) -> None:
    """The claim joins an event to its job on the day, and the marks name it: each reads
    one day's partitions, not every day's."""
    with clean_db.connect() as conn:
        plan = conn.execute(sa.text(
            f"EXPLAIN (FORMAT JSON) {queries.JobMarkRetry.text}"),
            {"id": 1, "created_at": datetime.now(UTC), "error": "x", "delay": 1}).scalar_one()
    scanned = _relations(plan[0]["Plan"])
    today = datetime.now(UTC).date()
    assert {name for name in scanned if name.startswith("jobs_")} == \
        {partitions.day_partition("jobs", today)}


def _relations(plan: dict[str, Any]) -> set[str]:
    found = {plan["Relation Name"]} if "Relation Name" in plan else set()
    for child in plan.get("Plans", []):
        found |= _relations(child)
    return found


def test_a_day_detached_by_a_prune_that_stopped_is_dropped_by_the_next(
        clean_db: Engine, old_day: Any) -> None:
    """A prune stopped after detaching a day (what it keeps copied in that transaction):
    the next drops the detached table."""
    name = partitions.day_partition("jobs", old_day)
    with clean_db.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE jobs DETACH PARTITION {name}"))
    assert scalar(clean_db, "SELECT to_regclass(:name) IS NOT NULL", name=name)
    assert partitions.prune(clean_db, days=30, horizon_days=90).partitions == 2
    assert not rows(clean_db, "SELECT relname FROM pg_class WHERE relname LIKE :name",
                    name=f"%_p{old_day:%Y%m%d}")


def test_the_day_the_cutoff_falls_in_is_left_to_its_drop(clean_db: Engine) -> None:
    """Its events finished before the cutoff are not deleted row by row: the whole day goes
    with its partition the night its last hour is past the cutoff."""
    cutoff = datetime.now(UTC) - timedelta(days=30)
    day = cutoff.date()
    with clean_db.begin() as conn:
        for table, key in partitions.TABLES:
            partitions._create_day(conn, table.name, key, day)
    try:
        before_cutoff = partitions.midnight(day) + (cutoff - partitions.midnight(day)) / 2
        event = factories.stripe_event("invoice.paid", factories.invoice())
        job_id = factories.insert_event_and_job(clean_db, event, status="done")
        age(clean_db, event["id"], before_cutoff)
        with clean_db.begin() as conn:
            conn.execute(sa.text("UPDATE jobs SET finished_at = :at WHERE id = :id"),
                         {"at": before_cutoff, "id": job_id})
        pruned = partitions.prune(clean_db, days=30, horizon_days=90)
        assert pruned.events == 0 and pruned.partitions == 0
        assert scalar(clean_db, "SELECT count(*) FROM webhook_events") == 1
    finally:
        with clean_db.begin() as conn:
            for table, _key in partitions.TABLES:
                conn.execute(sa.text(
                    f"DROP TABLE IF EXISTS {partitions.day_partition(table.name, day)}"))
