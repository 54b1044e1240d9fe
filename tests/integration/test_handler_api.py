"""The registration API, exercised with the README's example handler for GitHub."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories
from webhooks.shared import handlers
from webhooks.shared.settings import Settings
from webhooks.worker import jobs


def test_user_handler_module_named_in_settings_runs_in_the_job_transaction(
    settings: Settings, clean_db: Engine
) -> None:
    custom = Settings(**{**settings.__dict__,
                         "handler_modules": ("examples.handlers.github_push",)})
    handlers.load(custom)
    assert [app for app, _ in handlers.for_event("github", "push")] == [
        "examples.handlers.github_push"]
    payload = json.loads(open("examples/github/push.json").read())
    payload["id"] = "delivery-1"  # the github provider takes the id from a header
    job_id = factories.insert_event_and_job(clean_db, {**payload, "type": "push"},
                                            provider="github")
    assert jobs.process_batch(clean_db, custom).done == 1
    with clean_db.connect() as conn:
        rows = conn.execute(sa.text("SELECT delivery_id, repository FROM example_github_pushes"))
        assert [tuple(r) for r in rows] == [("delivery-1", "octo/hello")]
        outcome = conn.execute(sa.text("SELECT outcome FROM jobs WHERE id = :id"),
                               {"id": job_id}).scalar()
    assert outcome == "push to octo/hello recorded"
    with clean_db.begin() as conn:
        conn.execute(sa.text("DROP TABLE example_github_pushes"))
    # The module stays imported, its handler registered, but no later test names its app:
    # it runs nowhere else.


def test_registering_two_handlers_for_one_type_is_an_error() -> None:
    @handlers.handler("paddle", "test.once")
    def first(ctx: handlers.JobContext) -> None:
        return None

    with pytest.raises(ValueError, match="already registered"):
        @handlers.handler("paddle", "test.once")
        def second(ctx: handlers.JobContext) -> None:
            return None
