"""Migration 0013 on a database holding rows from before it (made at revision 0012): every
row's source backfilled to its provider, NOT NULL held, the new keys and foreign keys in
place and validated, and the dedup key per provider (per source for `standard`)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

from tests.conftest import ROOT, create_database, drop_database
from webhooks.shared import queries

ROWS = 25  # per provider: several backfill batches of 7


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
    _upgrade(url, "0012")
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("""
            INSERT INTO webhook_events (provider, event_id, event_type, payload)
            SELECT p, p || '_' || n, 't', '{}'::jsonb
            FROM unnest(ARRAY['stripe', 'standard']) AS p, generate_series(1, :n) AS n"""),
            {"n": ROWS})
        conn.execute(sa.text("INSERT INTO jobs (provider, event_id, event_type) "
                             "SELECT provider, event_id, event_type FROM webhook_events"))
        conn.execute(sa.text("INSERT INTO webhook_duplicates (provider, event_id) "
                             "SELECT provider, event_id FROM webhook_events LIMIT 3"))
    yield url, engine
    engine.dispose()
    drop_database(name)


def test_0013_backfills_in_batches_and_keys_events_per_provider(
        old_database: tuple[str, Engine]) -> None:
    url, engine = old_database
    _upgrade(url, "head", backfill_batch=7)
    with engine.connect() as conn:
        def scalar(statement: str) -> object:
            return conn.execute(sa.text(statement)).scalar()

        for table in ("webhook_events", "jobs", "webhook_duplicates"):
            assert scalar(f"SELECT count(*) FROM {table} WHERE source IS DISTINCT FROM "
                          "provider") == 0, table
            assert scalar(f"""SELECT attnotnull FROM pg_attribute
                              WHERE attrelid = '{table}'::regclass AND attname = 'source'""")
        assert scalar("SELECT count(*) FROM webhook_duplicates "
                      "WHERE event_source IS DISTINCT FROM provider") == 0
        assert scalar("SELECT count(*) FROM pg_constraint WHERE NOT convalidated "
                      "AND conrelid IN ('jobs'::regclass, 'webhook_duplicates'::regclass)") == 0
        assert scalar("SELECT count(*) FROM pg_constraint WHERE conname LIKE 'ck_%_not_null'") == 0
        assert scalar("SELECT count(*) FROM pg_index WHERE NOT indisvalid") == 0
    insert = sa.text("INSERT INTO webhook_events (provider, source, event_id, event_type, "
                     "payload) VALUES (:p, :s, :e, 't', '{}') ON CONFLICT DO NOTHING RETURNING id")
    with engine.begin() as conn:
        def inserted(provider: str, source: str, event_id: str) -> bool:
            return conn.execute(insert, {"p": provider, "s": source, "e": event_id}).first() \
                is not None

        # A Stripe event already recorded by the default source: a duplicate from any source.
        assert not inserted("stripe", "connect", "stripe_1")
        # The same Standard Webhooks message id from another sender is another event.
        assert inserted("standard", "clerk", "standard_1")
        assert not inserted("standard", "clerk", "standard_1")


def test_0014_keeps_a_providers_pause_as_a_pause_of_every_source_and_back(
        old_database: tuple[str, Engine]) -> None:
    url, engine = old_database
    _upgrade(url, "0013")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO paused_providers (provider) VALUES ('stripe')"))
    _upgrade(url, "0022")  # the last revision that goes back
    with engine.begin() as conn:
        assert conn.execute(sa.text("SELECT provider, source FROM paused_providers")).all() \
            == [("stripe", "*")]
        assert conn.execute(sa.text(f"SELECT count(*) FROM jobs WHERE {queries.DUE}")) \
            .scalar() == ROWS  # standard's only: every Stripe source stays paused
        conn.execute(sa.text("INSERT INTO paused_providers (provider, source) VALUES "
                             "('stripe', 'connect'), ('paddle', 'eu')"))
    config = Config(str(ROOT / "alembic.ini"))
    config.attributes["configure_logger"] = False
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0013")
    with engine.connect() as conn:  # a source's pause becomes its provider's: none runs early
        assert sorted(conn.execute(sa.text("SELECT provider FROM paused_providers")).scalars()) \
            == ["paddle", "stripe"]
