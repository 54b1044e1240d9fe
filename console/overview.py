"""`/`: per provider, events received, duplicates, jobs by status, paused or not, the age of
the oldest due job; and the events of the last 24 hours per hour."""

from __future__ import annotations

from datetime import UTC

from flask import Blueprint, render_template
from sqlalchemy.engine import Connection

from console import chart
from console.state import reading
from shared import events

CHART_HOURS = 24


def register(blueprint: Blueprint) -> None:
    blueprint.add_url_rule("/", "overview", show)


def show() -> str:
    with reading() as conn:
        providers = events.overview(conn)
        paused = paused_providers(conn)
        hours = events.events_per_hour(conn, CHART_HOURS)
    hours = [(hour.astimezone(UTC), count) for hour, count in hours]
    return render_template("console/overview.html", providers=providers, paused=paused,
                           chart=chart.layout(hours), hours=CHART_HOURS)


def paused_providers(conn: Connection) -> set[str]:
    """The providers whose jobs are paused. Pausing (`webhooks pause`) is not built yet:
    none is. When the core records it, read it here; the page already has the column."""
    return set()
