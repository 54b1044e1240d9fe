"""The overview's counts: exact on small tables; on large ones (here: the threshold lowered)
the statistics' estimates, which on a table ANALYZE samples whole equal the exact counts,
and the console marks them "≈". Pending and failed stay exact. Real Postgres."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa
from flask import Flask
from sqlalchemy.engine import Engine

from tests import factories
from tests.console_helpers import PASSWORD, basic
from webhooks.console import ConsoleSettings, create_blueprint
from webhooks.shared import overview, pausing

SOURCES = {("stripe", "stripe"): 30, ("stripe", "connect"): 12, ("github", "github"): 6,
           ("paddle", "paddle"): 1}


def load(engine: Engine) -> None:
    for (provider, source), n in SOURCES.items():
        for i in range(n):
            event = factories.stripe_event("invoice.paid", factories.invoice(),
                                           event_id=f"evt_{source}_{i}")
            status = "pending" if i == 0 else "failed" if i == 1 else "done"
            factories.insert_event_and_job(engine, event, provider=provider, source=source,
                                           status=status)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO webhook_duplicates (provider, source, event_id, event_source) "
            "SELECT provider, source, event_id, source FROM webhook_events "
            "WHERE source = 'stripe'"))


def analyze(engine: Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("ANALYZE webhook_events, jobs, webhook_duplicates"))


def counts(engine: Engine) -> dict[tuple[str, str], overview.ProviderCounts]:
    with engine.connect() as conn:
        return {(p.provider, p.source): p for p in overview.overview(conn)}


def as_numbers(found: dict[tuple[str, str], overview.ProviderCounts]) -> dict[
        tuple[str, str], tuple[int, ...]]:
    return {key: (p.received, p.duplicates, p.pending, p.done, p.failed)
            for key, p in found.items()}


def test_large_tables_are_counted_from_statistics_and_say_so(  # type: ignore[no-untyped-def]
        clean_db, monkeypatch: pytest.MonkeyPatch) -> None:
    load(clean_db)
    pausing.pause(clean_db, "stripe", "connect")
    exact = counts(clean_db)  # never analyzed: exact
    assert not any(p.estimated for p in exact.values())
    assert as_numbers(exact)[("stripe", "stripe")] == (30, 30, 1, 28, 1)
    assert as_numbers(exact)[("paddle", "paddle")] == (1, 0, 1, 0, 0)
    analyze(clean_db)
    monkeypatch.setattr(overview, "EXACT_BELOW_ROWS", 10)
    with clean_db.begin() as conn:  # exact counts would be wrong now: proof they are unread
        conn.execute(sa.text("DELETE FROM webhook_duplicates"))
    estimated = counts(clean_db)
    assert {p.estimated for p in estimated.values()} == {
        frozenset({"received", "duplicates", "done"})}
    # ANALYZE sampled every row: the shares are exact, so are the estimates (the rows
    # deleted since are not seen until the next ANALYZE).
    assert as_numbers(estimated) == as_numbers(exact)
    assert estimated[("stripe", "connect")].paused


def test_the_console_marks_estimates(clean_db, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    load(clean_db)
    app = Flask(__name__)
    app.register_blueprint(create_blueprint(clean_db, ConsoleSettings(password=PASSWORD)))
    with app.test_client() as client:
        page = client.get("/", headers=basic()).get_data(as_text=True)
        assert "≈" not in page
        analyze(clean_db)
        monkeypatch.setattr(overview, "EXACT_BELOW_ROWS", 10)
        page = client.get("/", headers=basic()).get_data(as_text=True)
    text = re.sub(r"<[^>]+>", "", page)
    assert text.count("≈28") == 1 and text.count("≈30") == 2  # stripe: done; received, dups
    assert "an estimate from Postgres's statistics" in page
