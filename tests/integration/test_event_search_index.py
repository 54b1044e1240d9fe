"""The event search, off the acknowledgement's transaction (migration 0017): the ingest
writes no search document and webhook_events has no GIN index; the worker writes an event's
document in its job's transaction, whatever the outcome, so that the event is found by its
words once its job has run, and by its id at once. Retention deletes the documents with
their events.

The plans must stay on their indexes: a change of shared.events' search that no longer
reads ix_event_search_document (or the unique key, for an id) would turn every search into
a sequential scan, silently. EXPLAIN of the statement list_events really sends says which
indexes the plan reads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from tests import factories
from webhooks import JobContext
from webhooks.clock import sweep
from webhooks.shared import db, handlers, recording, retention
from webhooks.shared.events import EventFilter, list_events
from webhooks.shared.models import JobStatus
from webhooks.shared.settings import Settings
from webhooks.worker import jobs

INDEX = "ix_event_search_document"
EVENT_KEYS = {"ux_webhook_events_provider_source_event_id_received_at",
              "ix_webhook_events_provider_event_id"}


def sent_statement(conn: Connection, spec: EventFilter) -> tuple[str, Any]:
    """The (statement, parameters) that list_events sends for `spec`."""
    sent: list[tuple[str, Any]] = []

    def listen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    sa.event.listen(conn, "before_cursor_execute", listen)
    try:
        list_events(conn, spec)
    finally:
        sa.event.remove(conn, "before_cursor_execute", listen)
    assert len(sent) == 1
    return sent[0]


def indexes_read(node: dict[str, Any]) -> Iterator[str]:
    if "Index Name" in node:
        yield node["Index Name"]
    for child in node.get("Plans", []):
        yield from indexes_read(child)


def plan_indexes(engine: Engine, spec: EventFilter) -> set[str]:
    with engine.connect() as conn, conn.begin():
        # A few rows: only a plan that cannot read the table sequentially is telling.
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        statement, parameters = sent_statement(conn, spec)
        plan: Any = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}",
                                         parameters).scalar_one()
        # A partition's index is read as its partitioned table's
        return set(conn.execute(sa.text(
            "SELECT coalesce(pg_partition_root(CAST(name AS regclass))::text, name) "
            "FROM unnest(CAST(:names AS text[])) AS name"),
            {"names": sorted(set(indexes_read(plan[0]["Plan"])))}).scalars())


def found(engine: Engine, search: str) -> list[str]:
    with engine.connect() as conn:
        return [row.event_id for row in list_events(conn, EventFilter(search=search)).events]


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar_one()


@pytest.fixture()
def some_events(clean_db: Engine) -> Engine:
    """2,000 events whose jobs are done, each with its document: enough that walking the
    events newest first costs more than the GIN index for a word few events hold."""
    with clean_db.begin() as conn:
        conn.execute(sa.text("""
            INSERT INTO webhook_events (provider, source, event_id, event_type, payload)
            SELECT 'stripe', 'stripe', 'evt_bulk_' || n, 'invoice.paid', jsonb_build_object(
                'id', 'evt_bulk_' || n, 'type', 'invoice.paid', 'data', jsonb_build_object(
                    'object', jsonb_build_object('id', 'in_' || n, 'currency', 'usd',
                                                 'customer_email', 'buyer' || n || '@example.com')))
            FROM generate_series(1, 2000) AS n
        """))
        conn.execute(sa.text("""
            INSERT INTO jobs (provider, source, event_id, event_type, status, attempts, finished_at)
            SELECT provider, source, event_id, event_type, 'done', 1, now() FROM webhook_events
        """))
        for job_id in conn.execute(sa.text("SELECT id FROM jobs")).scalars():
            factories.index_for_search(conn, job_id)
    with clean_db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE webhook_events"))
        conn.execute(sa.text("ANALYZE jobs"))
        conn.execute(sa.text("ANALYZE event_search"))
    return clean_db


@pytest.fixture()
def ingest(settings: Settings, clean_db: Engine) -> Iterator[Engine]:
    """The ingest's engine (autocommit), for shared.recording."""
    engine = db.create_engine(settings, pool_size=1, autocommit=True)
    yield engine
    engine.dispose()


def record(engine: Engine, event: dict[str, Any]) -> recording.RecordingResult:
    """Through the ingest's own statement (shared.recording), as a delivery is recorded."""
    return recording.record_event(engine, "stripe", event["id"], event["type"],
                                  json.dumps(event).encode())


def test_an_event_is_found_by_its_words_once_its_job_has_run(
        clean_db: Engine, ingest: Engine, settings: Settings) -> None:
    event = factories.stripe_event("invoice.paid", factories.invoice(
        "in_Rare81x", email="grace.hopper@navy.example"))
    assert not record(ingest, event).duplicate
    # Acknowledged: by its id at once, by its words not yet (the ingest wrote no document).
    assert found(clean_db, event["id"]) == [event["id"]]
    assert found(clean_db, "grace.hopper@navy.example") == []
    assert scalar(clean_db, "SELECT count(*) FROM event_search") == 0
    assert jobs.process_batch(clean_db, settings).done == 1
    assert found(clean_db, "grace.hopper@navy.example") == [event["id"]]
    assert found(clean_db, "in_Rare81x") == [event["id"]]
    assert found(clean_db, event["id"]) == [event["id"]]  # once, not by id and by words


def test_a_failed_jobs_event_is_searchable(clean_db: Engine, ingest: Engine,
                                          settings: Settings) -> None:
    """Retried, then failed for good: its document is written by the failing attempt's
    transaction, not rolled back with the handler's writes."""
    @handlers.handler("stripe", "test.search_explodes")
    def explodes(ctx: JobContext) -> None:
        raise RuntimeError("boom")

    event = factories.stripe_event("test.search_explodes", {"note": "unlucky-octopus"})
    record(ingest, event)
    once = Settings(**{**settings.__dict__, "job_max_attempts": 1})
    result = jobs.process_batch(clean_db, once)
    assert result.failed == 1
    assert found(clean_db, "unlucky-octopus") == [event["id"]]


def test_a_retried_jobs_event_is_searchable(clean_db: Engine, ingest: Engine,
                                           settings: Settings) -> None:
    @handlers.handler("stripe", "test.search_retries")
    def explodes(ctx: JobContext) -> None:
        raise RuntimeError("later")

    bad = factories.stripe_event("test.search_retries", {"memo": "walrus"})
    record(ingest, bad)
    result = jobs.process_batch(clean_db, settings)
    assert len(result.retried) == 1
    assert scalar(clean_db, "SELECT status FROM jobs") == "pending"
    assert found(clean_db, "walrus") == [bad["id"]]


def test_a_job_done_with_no_handler_makes_its_event_searchable(
        clean_db: Engine, ingest: Engine, settings: Settings) -> None:
    event = factories.stripe_event("nobody.handles.this", {"label": "quixotic"})
    record(ingest, event)
    assert jobs.process_batch(clean_db, settings).done == 1
    assert found(clean_db, "quixotic") == [event["id"]]


def test_the_ingests_tables_have_no_gin_index(clean_db: Engine) -> None:
    """The ingest's statement (queries.EventJobInsert) writes webhook_events and jobs: no
    GIN index on either, so no acknowledgement maintains (or flushes) one."""
    with clean_db.connect() as conn:
        gin = conn.execute(sa.text("""
            SELECT c.relname AS table_name, i.relname AS index_name
            FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
            JOIN pg_class c ON c.oid = x.indrelid JOIN pg_am a ON a.oid = i.relam
            WHERE a.amname = 'gin' AND NOT i.relispartition
        """)).all()
    assert [(row.table_name, row.index_name) for row in gin] == [("event_search", INDEX)]


def test_prune_deletes_the_search_documents_with_their_events(clean_db: Engine) -> None:
    old = factories.stripe_event("invoice.paid", factories.invoice(email="old@example.com"))
    new = factories.stripe_event("invoice.paid", factories.invoice(email="new@example.com"))
    old_job = factories.insert_event_and_job(clean_db, old, status="done")
    factories.insert_event_and_job(clean_db, new, status="done")
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET finished_at = now() - :age WHERE id = :id"),
                     {"age": timedelta(days=40), "id": old_job})
    assert retention.prune(clean_db, days=30, horizon_days=90).events == 1
    assert scalar(clean_db, "SELECT array_agg(event_id) FROM event_search") == [new["id"]]
    assert found(clean_db, "new@example.com") == [new["id"]]


@pytest.mark.parametrize("search", ["buyer7@example.com", "evt_0123456789abcdef",
                                    "in_42", "two words"])
def test_search_reads_the_gin_index(some_events, search) -> None:  # type: ignore[no-untyped-def]
    read = plan_indexes(some_events, EventFilter(search=search))
    assert INDEX in read and EVENT_KEYS & read  # the words, and the id in each source


def test_search_finds_the_bulk_events_by_word_and_by_id(some_events) -> None:  # type: ignore[no-untyped-def]
    assert found(some_events, "buyer7@example.com") == ["evt_bulk_7"]
    assert found(some_events, "evt_bulk_1999") == ["evt_bulk_1999"]
    assert len(found(some_events, "usd")) == 50  # a page of a word all events hold


def test_search_with_other_filters_reads_the_documents_by_an_index(some_events) -> None:  # type: ignore[no-untyped-def]
    # Every job failed, every event Stripe's invoice.paid: the other filters select all
    # rows. The planner may start from the GIN index, or from the events and probe each
    # one's document by its primary key; never a scan of the documents.
    with some_events.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'failed', finished_at = now()"))
    with some_events.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE jobs"))
    spec = EventFilter(provider="stripe", event_type="invoice.paid", status=JobStatus.FAILED,
                       search="buyer7@example.com")
    assert {INDEX, "pk_event_search"} & plan_indexes(some_events, spec)


def test_the_index_is_the_migrations(clean_db) -> None:  # type: ignore[no-untyped-def]
    """The index exists in the migrated database, as a GIN index over the documents."""
    with clean_db.connect() as conn:
        definition = conn.execute(sa.text(
            "SELECT indexdef FROM pg_indexes WHERE indexname = :name"),
            {"name": INDEX}).scalar_one()
    assert "USING gin (document)" in definition


def test_the_sweep_merges_the_search_pending_list(clean_db: Engine) -> None:
    """Documents the worker writes are appended to the GIN index's pending list; the
    clock's sweep merges them, so that no worker's batch does, and they stay found."""
    for n in range(30):
        factories.insert_event_and_job(clean_db, factories.stripe_event(
            "invoice.paid", factories.invoice(email=f"pending{n}@example.com")), status="done")
    with clean_db.connect() as conn:
        options = conn.execute(sa.text(
            "SELECT reloptions FROM pg_class WHERE relname = :name"), {"name": INDEX}).scalar()
    assert options == ["gin_pending_list_limit=65536"]
    assert sweep.flush_search(clean_db) > 0  # pages merged
    assert sweep.flush_search(clean_db) == 0  # nothing left pending
    assert len(found(clean_db, "pending7@example.com")) == 1
