"""Migration 0021 on a database holding GitHub and Shopify events from before it (made at
revision 0020): the body digest keyed per event type in place, 0009's index gone, and
deliveries recorded throughout with no lock on the tables stronger than the index build's."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchmarks import migration_locks
from tests.conftest import create_database, drop_database
from webhooks.shared import recording

BODY = b'{"id": 820982911946154508, "email": "jon@example.com", "total_price": "598.94"}'


@pytest.fixture()
def old_database() -> Iterator[tuple[str, Engine]]:
    name = f"webhooks_test_mig_{secrets.token_hex(4)}"
    url = create_database(name)
    migration_locks.upgrade(url, "0020")
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        conn.execute(sa.text("""
            INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                        body_sha256)
            VALUES ('shopify', 'shopify', 'wh-create', 'orders/create', CAST(:body AS jsonb),
                    :digest)"""), {"body": BODY.decode(), "digest": hashlib.sha256(BODY).digest()})
    yield url, engine
    engine.dispose()
    drop_database(name)


def _indexes(engine: Engine) -> dict[str, bool]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("""
            SELECT c.relname, i.indisvalid
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = 'webhook_events'::regclass
              AND c.relname LIKE 'ux_webhook_events_body%'
        """)).all())


def test_0021_keys_the_body_per_type_in_place(old_database: tuple[str, Engine]) -> None:
    """The body recorded under one type before 0021 (when a body was one event whatever its
    type) is keyed by its type from then on: in the index 0021 builds, and at the head in
    the dedup keys 0023 backfills from the events."""
    url, engine = old_database
    migration_locks.upgrade(url, "0021")
    assert _indexes(engine) == {"ux_webhook_events_body_type": True}
    migration_locks.upgrade(url, "head")
    paid = recording.record_event(engine, "shopify", "wh-paid", "orders/paid", BODY)
    assert not paid.duplicate and paid.job_id is not None
    minted = recording.record_event(engine, "shopify", "wh-minted", "orders/create", BODY)
    assert minted.duplicate and minted.event_id == "wh-create"


def test_0021_rebuilds_an_index_an_interrupted_build_left_invalid(
        old_database: tuple[str, Engine]) -> None:
    url, engine = old_database
    with engine.connect() as conn:
        conn.execute(sa.text("CREATE UNIQUE INDEX ux_webhook_events_body_type ON webhook_events "
                             "(provider, body_sha256) WHERE body_sha256 IS NOT NULL"))
        conn.execute(sa.text("UPDATE pg_index SET indisvalid = false "
                             "WHERE indexrelid = 'ux_webhook_events_body_type'::regclass"))
    migration_locks.upgrade(url, "0021")
    assert _indexes(engine) == {"ux_webhook_events_body_type": True}
    migration_locks.upgrade(url, "head")
    assert not recording.record_event(engine, "shopify", "wh-paid", "orders/paid", BODY).duplicate


def test_deliveries_are_recorded_throughout_0021() -> None:
    """benchmarks/migration_locks.py, small: writers record deliveries while 0021 runs, and
    the migration takes no lock on webhook_events or jobs that blocks an insert."""
    name = f"webhooks_test_mig_{secrets.token_hex(4)}"
    url = create_database(name)
    try:
        result = migration_locks.measure(url, 5_000, "0020", "0021", writers=2)
    finally:
        drop_database(name)
    assert any("CREATE UNIQUE INDEX CONCURRENTLY" in s["sql"] for s in result["statements"])
    assert any("DROP INDEX CONCURRENTLY" in s["sql"] for s in result["statements"])
    blocking = {"RowExclusiveLock", "ShareLock", "ShareRowExclusiveLock", "ExclusiveLock",
                "AccessExclusiveLock"}
    assert not [held for held in result["locks_held"] if held.split()[-1] in blocking]
    assert result["acks_during"]["count"] > 0 and result["acks_before"]["count"] > 0
