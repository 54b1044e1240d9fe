"""A second app for one event type (tests/apps/alpha.py's), with a "*" handler too."""

from __future__ import annotations

from tests.apps.alpha import SEEN
from webhooks import JobContext, handler


@handler("stripe", "test.two_apps")
def note(ctx: JobContext) -> str:
    SEEN.append(("beta", ctx.event_id))
    return "beta noted"


@handler("stripe", "*")
def anything(ctx: JobContext) -> str:
    return "beta saw it"
