"""The per-source overview (the console's `/`): events received, duplicates, jobs by
status, the age of the oldest due job, paused or not; exact on small tables, estimated on
large ones.

Exact grouped counts read every row: on a table of ten million jobs, a sequential scan per
page load. So, as web's `/metrics` does for done jobs (ingest/health.py), a table of
EXACT_BELOW_ROWS rows or more by the planner's estimate (pg_class.reltuples; -1, never
analyzed, counts as small) is counted from Postgres's statistics instead:

- its row estimate times each (provider, source) pair's share of the rows, as the last
  ANALYZE sampled it (the extended statistics of migration 0019, pg_stats_ext);
- a pair too rare to be among the sampled pairs is counted exactly through the table's
  unique (provider, source, ...) index, which for a rare pair reads few entries; the
  duplicates table has no such index, and a rare pair's duplicates are estimated 0;
- pending and failed jobs are always exact (the pending index; ix_jobs_status_finished_at:
  few rows), and done jobs are the pair's estimated jobs less those two.

Each count says whether it is an estimate (ProviderCounts.estimated), and the console marks
it "≈". An estimate is as fresh as the table's last ANALYZE (autovacuum's, after a tenth of
the table changed); it is never negative.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from webhooks.shared import queries, sources
from webhooks.shared.models import (
    ALL_SOURCES,
    JobStatus,
    jobs,
    paused_providers,
    webhook_duplicates,
    webhook_events,
)

EXACT_BELOW_ROWS = 100_000  # larger tables are counted from the statistics

Key = tuple[str, str]  # (provider, source)


@dataclass(frozen=True)
class ProviderCounts:
    provider: str
    received: int
    duplicates: int
    pending: int
    done: int
    failed: int
    oldest_due_seconds: float | None  # age of the oldest due pending job (paused or not)
    paused: bool = False  # the provider as a whole or this source
    provider_paused: bool = False  # the provider as a whole (`webhooks pause stripe`)
    source: str = ""  # the source's name (the provider's for its default source)
    estimated: frozenset[str] = frozenset()  # of received, duplicates, done: the estimates

    @property
    def label(self) -> str:
        """`stripe`, `stripe/connect`: as commands name the source."""
        return sources.label(self.provider, self.source)


@dataclass(frozen=True)
class _Counted:
    """A table's count per source, and whether it was estimated."""

    by_key: dict[Key, int]
    estimated: bool


def overview(conn: Connection, configured: Iterable[Key] = ()) -> list[ProviderCounts]:
    """Per source: events received, duplicates, jobs by status, oldest due job's age,
    paused or not. Listed: the configured sources, those with rows, and the paused ones
    (a paused provider's default source stands for it), even before their first event."""
    rows = {row.relname: float(row.reltuples)
            for row in conn.execute(queries.OverviewTableEstimates)}
    shares = _shares(conn)
    j, p = jobs.c, paused_providers.c
    open_jobs = {(row.provider, row.source, row.status): int(row.n)
                 for statement in (queries.OverviewJobsPending, queries.OverviewJobsFailed)
                 for row in conn.execute(statement)}
    oldest = _by_key(conn, sa.select(
        j.provider, j.source, sa.func.extract("epoch", sa.func.now() - sa.func.min(j.run_at)))
        .where(j.status == str(JobStatus.PENDING), j.run_at <= sa.func.now())
        .group_by(j.provider, j.source))
    pauses = {(row.provider, row.source) for row in conn.execute(sa.select(p.provider, p.source))}
    known = ({(pr, so) for pr, so, _ in open_jobs} | set(configured)
             | {(pr, pr if so == ALL_SOURCES else so) for pr, so in pauses})
    received = _count(conn, webhook_events, rows, shares, known)
    duplicates = _count(conn, webhook_duplicates, rows, shares, known)
    all_jobs = _count(conn, jobs, rows, shares, known)
    keys = sorted(known | set(received.by_key) | set(duplicates.by_key) | set(all_jobs.by_key))
    estimated = frozenset(name for name, counted in (
        ("received", received), ("duplicates", duplicates), ("done", all_jobs))
        if counted.estimated)

    def counts(pr: str, so: str) -> ProviderCounts:
        pending = open_jobs.get((pr, so, JobStatus.PENDING), 0)
        failed = open_jobs.get((pr, so, JobStatus.FAILED), 0)
        return ProviderCounts(
            provider=pr, source=so, received=received.by_key.get((pr, so), 0),
            duplicates=duplicates.by_key.get((pr, so), 0), pending=pending,
            done=max(all_jobs.by_key.get((pr, so), 0) - pending - failed, 0), failed=failed,
            oldest_due_seconds=float(oldest[pr, so]) if (pr, so) in oldest else None,
            paused=bool(pauses & {(pr, ALL_SOURCES), (pr, so)}),
            provider_paused=(pr, ALL_SOURCES) in pauses, estimated=estimated)

    return [counts(pr, so) for pr, so in keys]


def _count(conn: Connection, table: sa.Table, rows: dict[str, float],
           shares: dict[str, dict[Key, float]], known: set[Key]) -> _Counted:
    """The table's rows per source: exact while it is small, else estimated (the module's
    docstring)."""
    estimate = rows.get(table.name, -1.0)
    c = table.c
    if estimate < EXACT_BELOW_ROWS:
        return _Counted(_by_key(conn, sa.select(c.provider, c.source, sa.func.count())
                                .group_by(c.provider, c.source)), estimated=False)
    sampled = shares.get(table.name, {})
    by_key = {key: round(estimate * share) for key, share in sampled.items()}
    if table is not webhook_duplicates:
        for provider, source in known - set(sampled):
            by_key[(provider, source)] = conn.execute(
                sa.select(sa.func.count()).select_from(table)
                .where(c.provider == provider, c.source == source)).scalar_one()
    return _Counted({key: n for key, n in by_key.items() if n > 0}, estimated=True)


def _shares(conn: Connection) -> dict[str, dict[Key, float]]:
    shares: dict[str, dict[Key, float]] = {}
    for row in conn.execute(queries.OverviewSourceShares):
        shares.setdefault(row.tablename, {})[(row.provider, row.source)] = float(row.share)
    return shares


def _by_key(conn: Connection, query: sa.Select[Any]) -> dict[Key, Any]:
    return {(row[0], row[1]): row[2] for row in conn.execute(query)}
