"""An app that handles Stripe's invoice.paid beside (or instead of) the reference app."""

from __future__ import annotations

from webhooks import JobContext, handler

SEEN: list[tuple[str, str]] = []


@handler("stripe", "invoice.paid", "test.two_apps")
def note(ctx: JobContext) -> str:
    SEEN.append(("alpha", ctx.event_id))
    return "alpha noted"
