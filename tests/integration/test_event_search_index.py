"""The event search must stay on its GIN index (migration 0008, ix_webhook_events_search_bounded):
a change of shared.events' search expression that no longer matches the index's would turn
every search into a sequential scan of the whole table, silently. EXPLAIN of the statement
list_events really sends says which index the plan reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from shared.events import EventFilter, list_events
from shared.models import JobStatus
from tests import factories

INDEX = "ix_webhook_events_search_bounded"


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
    return set(indexes_read(plan[0]["Plan"]))


@pytest.fixture()
def some_events(clean_db: Engine) -> Engine:
    for n in range(20):
        factories.insert_event_and_job(clean_db, factories.stripe_event(
            "invoice.paid", factories.invoice(email=f"buyer{n}@example.com")))
    with clean_db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE webhook_events"))
    return clean_db


@pytest.mark.parametrize("search", ["buyer7@example.com", "evt_0123456789abcdef",
                                    "in_42", "two words"])
def test_search_reads_the_gin_index(some_events, search) -> None:  # type: ignore[no-untyped-def]
    assert INDEX in plan_indexes(some_events, EventFilter(search=search))


def test_search_with_other_filters_reads_the_gin_index(some_events) -> None:  # type: ignore[no-untyped-def]
    # Every job failed, every event Stripe's invoice.paid: the other filters select all
    # rows, so the search is the selective condition and its index the plan's way in.
    # (With few failed jobs the planner rightly starts from the failed jobs instead.)
    with some_events.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET status = 'failed', finished_at = now()"))
    with some_events.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE jobs"))
    spec = EventFilter(provider="stripe", event_type="invoice.paid", status=JobStatus.FAILED,
                       search="buyer7@example.com")
    assert INDEX in plan_indexes(some_events, spec)


def test_the_index_is_the_migrations(clean_db) -> None:  # type: ignore[no-untyped-def]
    """The index exists in the migrated database, as a GIN index over the search document."""
    with clean_db.connect() as conn:
        definition = conn.execute(sa.text(
            "SELECT indexdef FROM pg_indexes WHERE indexname = :name"),
            {"name": INDEX}).scalar_one()
    assert "USING gin" in definition and "jsonb_to_tsvector" in definition
