"""`webhooks stats`: per day, events received, duplicates, jobs done and failed, emails."""

from __future__ import annotations

from collections import defaultdict
from datetime import date

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from webhooks.shared.models import EmailStatus, JobStatus

COLUMNS = ("received", "duplicates", "done", "failed", "emails_sent", "emails_failed")

# Each line: (column, table, timestamp column, extra condition).
_SOURCES = (
    ("received", "webhook_events", "received_at", "TRUE"),
    ("duplicates", "webhook_duplicates", "received_at", "TRUE"),
    ("done", "jobs", "finished_at", f"status = '{JobStatus.DONE}'"),
    ("failed", "jobs", "finished_at", f"status = '{JobStatus.FAILED}'"),
    ("emails_sent", "outbox", "sent_at", f"status = '{EmailStatus.SENT}'"),
    ("emails_failed", "outbox", "created_at", f"status = '{EmailStatus.FAILED}'"),
)


def daily(engine: Engine, days: int) -> dict[date, dict[str, int]]:
    table: dict[date, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COLUMNS, 0))
    with engine.connect() as conn:
        for column, source, stamp, condition in _SOURCES:
            rows = conn.execute(sa.text(
                f"SELECT date_trunc('day', {stamp})::date AS day, count(*) AS n FROM {source} "
                f"WHERE {condition} AND {stamp} >= current_date - make_interval(days => :days) "
                "GROUP BY 1"
            ), {"days": days - 1})
            for row in rows:
                table[row.day][column] = row.n
    return dict(sorted(table.items()))


def render(table: dict[date, dict[str, int]]) -> str:
    header = ["day", *COLUMNS]
    lines = [[str(day), *(str(counts[c]) for c in COLUMNS)] for day, counts in table.items()]
    totals = ["total", *(str(sum(c[col] for c in table.values())) for col in COLUMNS)]
    rows = [header, *lines, totals]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    out = []
    for index, row in enumerate(rows):
        out.append("  ".join(cell.rjust(w) if i else cell.ljust(w)
                             for i, (cell, w) in enumerate(zip(row, widths, strict=True))))
        if index == 0 or index == len(rows) - 2:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
