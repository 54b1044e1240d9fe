"""`/`: per source, events received, duplicates, jobs by status, paused or not, the age of
the oldest due job; and the events of the last 24 hours per hour. Every configured source
is listed, with zeros before its first event (a new Connect endpoint, say), so that it can
be paused before anything arrives. On large tables the counts are the statistics'
estimates (shared/overview.py), marked "≈"."""

from __future__ import annotations

from datetime import UTC

from flask import Blueprint, render_template

from webhooks.console import chart
from webhooks.console.state import current, reading
from webhooks.shared import events, overview

CHART_HOURS = 24


def register(blueprint: Blueprint) -> None:
    blueprint.add_url_rule("/", "overview", show)


def show() -> str:
    with reading() as conn:
        providers = overview.overview(conn, current().sources)
        hours = events.events_per_hour(conn, CHART_HOURS)
    hours = [(hour.astimezone(UTC), count) for hour, count in hours]
    return render_template("console/overview.html", providers=providers,
                           chart=chart.layout(hours), hours=CHART_HOURS,
                           exact_below=f"{overview.EXACT_BELOW_ROWS:,}")
