"""Migration 0017 on a database holding events from before it (made at revision 0015):
every event's search document backfilled in batches, whatever its job's state, so that
search finds what it found before; the GIN index on webhook_events gone and the one on
event_search valid."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

from tests.conftest import ROOT, create_database, drop_database
from webhooks.shared.events import EventFilter, list_events

ROWS = 25  # several backfill batches of 7


def _upgrade(url: str, revision: str, **attributes: object) -> None:
    config = Config(str(ROOT / "alembic.ini"))
    config.attributes.update(configure_logger=False, **attributes)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    engine.dispose()


@pytest.fixture()
def old_database() -> Iterator[tuple[str, Engine]]:
    name = f"webhooks_test_mig_{secrets.token_hex(4)}"
    url = create_database(name)
    _upgrade(url, "0015")
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("""
            INSERT INTO webhook_events (provider, source, event_id, event_type, payload)
            SELECT 'stripe', 'stripe', 'evt_old_' || n, 'invoice.paid',
                   jsonb_build_object('email', 'person' || n || '@example.com')
            FROM generate_series(1, :n) AS n"""), {"n": ROWS})
        conn.execute(sa.text("""
            INSERT INTO jobs (provider, source, event_id, event_type, status)
            SELECT provider, source, event_id, event_type,
                   CASE WHEN id % 3 = 0 THEN 'pending' ELSE 'done' END FROM webhook_events"""))
    yield url, engine
    engine.dispose()
    drop_database(name)


def test_0017_backfills_every_events_document_and_drops_the_ingests_gin_index(
        old_database: tuple[str, Engine]) -> None:
    url, engine = old_database
    _upgrade(url, "head", backfill_batch=7)
    with engine.connect() as conn:
        def scalar(statement: str) -> object:
            return conn.execute(sa.text(statement)).scalar()

        assert scalar("SELECT count(*) FROM event_search") == ROWS
        assert scalar("SELECT to_regclass('ix_webhook_events_search_bounded')") is None
        assert scalar("SELECT count(*) FROM pg_index WHERE NOT indisvalid") == 0
        assert scalar("SELECT to_regclass('ix_event_search_document')") is not None
        # A pending job's event too: it was searchable before the migration.
        for n in (3, 25):
            page = list_events(conn, EventFilter(search=f"person{n}@example.com"))
            assert [row.event_id for row in page.events] == [f"evt_old_{n}"]
