"""Finding events: the listing with filters and keyset pagination, one event with its job,
its emails and its effects (as the effects hooks of its provider show them, shared.hooks),
and the events per hour (the overview's counts are in shared/overview.py). Read-only;
`webhooks events`, `webhooks show` and the console all read through here.

Search (`EventFilter.search`) matches an event id exactly, at once (the unique indexes of
webhook_events), or a word or phrase of the payload's string and number values (Postgres
full-text search, `simple` configuration: no stemming, case-insensitive) once the event's
job has run: the worker writes each event's document into event_search (GIN-indexed) in
its job's transaction, whatever the outcome, never the ingest (shared/models.py). A
just-acknowledged event is found by its id until then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from webhooks.shared import hooks, payloads
from webhooks.shared.models import (
    ALL_SOURCES,
    EmailStatus,
    JobStatus,
    event_search,
    jobs,
    outbox,
    paused_providers,
    webhook_duplicates,
    webhook_events,
)

_SIMPLE: sa.ColumnElement[Any] = sa.literal_column("'simple'::regconfig")
MAX_PAGE = 500
MAX_ROW_ID = 2**63 - 1  # bigint
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class EventFilter:
    provider: str | None = None
    event_type: str | None = None
    status: JobStatus | None = None
    since: datetime | None = None
    until: datetime | None = None
    search: str | None = None
    source: str | None = None  # a source's name, with its provider (`--source stripe/connect`)


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the next page has the events received before this one."""

    received_at: datetime
    id: int

    def token(self) -> str:
        """URL-safe: microseconds since the epoch, and the row id."""
        micros = (self.received_at - EPOCH) // timedelta(microseconds=1)
        return f"{micros}_{self.id}"

    @classmethod
    def parse(cls, token: str) -> Cursor:
        """ValueError on anything but a token() of ours."""
        micros, _, row_id = token.partition("_")
        found = cls(EPOCH + timedelta(microseconds=int(micros)), int(row_id))
        if not 0 < found.id <= MAX_ROW_ID:
            raise ValueError(f"row id {found.id} is out of range")
        return found


@dataclass(frozen=True)
class EventRow:
    id: int
    provider: str
    event_id: str
    event_type: str
    received_at: datetime
    job_id: int | None
    status: str | None  # None: the job was pruned (never: retention drops both)
    attempts: int
    last_error: str | None
    paused: bool = False  # its source is paused (`webhooks pause`): a pending job waits
    source: str = ""  # the source that delivered or reconciled it first
    account: str | None = None  # Stripe's connected account


@dataclass(frozen=True)
class Page:
    events: list[EventRow]
    next: Cursor | None  # None: this was the last page


def _listing() -> sa.Select[Any]:
    e, j = webhook_events.c, jobs.c
    return sa.select(
        e.id, e.provider, e.event_id, e.event_type, e.received_at, j.id.label("job_id"),
        j.status, sa.func.coalesce(j.attempts, 0).label("attempts"), j.last_error,
        _paused(e.provider, e.source).label("paused"), e.source, e.account,
    ).select_from(webhook_events.outerjoin(
        jobs, sa.and_(j.provider == e.provider, j.source == e.source, j.event_id == e.event_id,
                      j.created_at == e.received_at),  # the event's day: its job's partition
    ))


def _paused(provider: sa.ColumnElement[str], source: sa.ColumnElement[str],
            ) -> sa.ColumnElement[bool]:
    """Whether the provider or the source is paused: queries.DUE's test, on its primary key."""
    p = paused_providers.c
    return sa.exists().where(p.provider == provider, p.source.in_([ALL_SOURCES, source]))


def _where(query: sa.Select[Any], spec: EventFilter) -> sa.Select[Any]:
    e, j = webhook_events.c, jobs.c
    if spec.provider:
        query = query.where(e.provider == spec.provider)
    if spec.source:
        query = query.where(e.source == spec.source)
    if spec.event_type:
        query = query.where(e.event_type == spec.event_type)
    if spec.status:
        query = query.where(j.status == str(spec.status))
    if spec.since:
        query = query.where(e.received_at >= spec.since)
    if spec.until:
        query = query.where(e.received_at < spec.until)
    return query


def _branches(spec: EventFilter) -> list[sa.Select[Any]]:
    """The listing with spec's filters; with a search, as two disjoint queries planned on
    their own: the events whose search document holds its words (the GIN index, or each
    event's document by its key when other filters select few events), and those whose
    id it is and whose document does not (not yet written: the job has not run). Their
    UNION ALL, not an OR, which would read every event, and not one IN (... UNION ...),
    which Postgres materializes whole (a common word: most of the table)."""
    query = _where(_listing(), spec)
    search = (spec.search or "").strip()
    if not search:
        return [query]
    e, s = webhook_events.c, event_search.c
    words = sa.func.phraseto_tsquery(_SIMPLE, search)
    holds = sa.exists().where(s.provider == e.provider, s.source == e.source,
                              s.event_id == e.event_id, s.document.op("@@")(words))
    keys = _sources()
    named = sa.and_(e.event_id == search, sa.tuple_(e.provider, e.source).in_(
        sa.select(keys.c.provider, keys.c.source)))
    return [query.where(holds), query.where(named, ~holds)]


def _sources() -> sa.CTE:
    """Every (provider, source) events have, by a skip scan of the unique (provider, source,
    event_id, received_at) index: one probe per source (in each partition), so that an
    event id is looked up in each source's part of that index instead of reading all of
    it."""
    e = webhook_events.c
    first = sa.select(e.provider, e.source).order_by(e.provider, e.source).limit(1)
    keys = first.cte("event_sources", recursive=True)
    after = (sa.select(e.provider, e.source)
             .where(sa.tuple_(e.provider, e.source) > sa.tuple_(keys.c.provider, keys.c.source))
             .order_by(e.provider, e.source).limit(1).lateral("next_source"))
    return keys.union_all(sa.select(after.c.provider, after.c.source)
                          .select_from(keys).join(after, sa.true()))


def _newest_first(query: sa.Select[Any], limit: int) -> sa.Select[Any]:
    e = webhook_events.c
    return query.order_by(e.received_at.desc(), e.id.desc()).limit(limit)


def list_events(conn: Connection, spec: EventFilter, *, limit: int = 50,
                after: Cursor | None = None) -> Page:
    """Events newest first, `limit` at a time; `after` is the previous page's `next`."""
    limit = max(1, min(limit, MAX_PAGE))
    e = webhook_events.c
    pages = []
    for query in _branches(spec):
        if after is not None:
            query = query.where(sa.tuple_(e.received_at, e.id) < sa.tuple_(
                sa.literal(after.received_at), sa.literal(after.id)))
        pages.append(_newest_first(query, limit + 1))
    if len(pages) > 1:  # each branch's newest, then the newest of them
        both = sa.union_all(*pages).subquery()
        pages = [sa.select(both).order_by(both.c.received_at.desc(), both.c.id.desc())
                 .limit(limit + 1)]
    rows = [EventRow(**row._mapping) for row in conn.execute(pages[0])]
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, Cursor(rows[-1].received_at, rows[-1].id) if more else None)


def payloads_of(conn: Connection, rows: list[EventRow]) -> dict[int, str]:
    """The payloads of a page's events, by row id, in one query: each as the text Postgres
    prints its jsonb, not loaded (a number Python would round, a nesting Python cannot
    load, stay as recorded)."""
    e = webhook_events.c
    query = sa.select(e.id, sa.cast(e.payload, sa.Text)).where(
        e.id.in_([row.id for row in rows]))
    return {row_id: text for row_id, text in conn.execute(query)}


def count_events(conn: Connection, spec: EventFilter, *, at_most: int | None = None) -> int:
    """How many events match; with at_most, counting stops after at_most + 1 (a page's
    "10,000+" must not count a million rows on every view)."""
    total = 0
    for query in _branches(spec):
        if at_most is None:
            total += int(conn.execute(query.with_only_columns(sa.func.count())).scalar_one())
            continue
        matching = query.with_only_columns(webhook_events.c.id).limit(at_most + 1).subquery()
        total += int(conn.execute(sa.select(sa.func.count()).select_from(matching)).scalar_one())
    return total if at_most is None else min(total, at_most + 1)


@dataclass(frozen=True)
class EventDetail:
    """What `webhooks show` and the console's event page show."""

    event: dict[str, Any]  # provider, event_id, event_type, received_at, payload
    job: dict[str, Any] | None  # id, status, attempts, last_error, outcome, times
    duplicates: int
    # What its provider's effects hooks show (the reference app: ledger entries, subscription)
    effects: list[hooks.Section] = field(default_factory=list)
    emails: list[dict[str, Any]] = field(default_factory=list)


def show_event(conn: Connection, provider: str, event_id: str) -> EventDetail | None:
    e, j, d = webhook_events.c, jobs.c, webhook_duplicates.c
    key = {"provider": provider, "event_id": event_id}
    # The payload as text, loaded here: a row Python cannot load (shared.payloads) is
    # shown as the text Postgres holds, with the reason, instead of failing the page.
    event = conn.execute(sa.select(e.provider, e.source, e.event_id, e.event_type,
                                   e.received_at, e.account, e.livemode,
                                   sa.cast(e.payload, sa.Text).label("payload"))
                         .where(e.provider == provider, e.event_id == event_id)).first()
    if event is None:
        return None
    fields = dict(event._mapping)
    payload = fields["payload"] = payloads.load(event.payload)
    if isinstance(payload, payloads.Unloadable):
        fields.update(payload=payload.text, payload_error=payload.reason)
    job = conn.execute(sa.select(j.id, j.status, j.attempts, j.last_error, j.outcome,
                                 j.created_at, j.run_at, j.finished_at)
                       .where(j.provider == provider, j.source == event.source,
                              j.event_id == event_id,
                              j.created_at == event.received_at)).first()
    duplicates = conn.execute(sa.select(sa.func.count()).where(
        d.provider == provider, d.event_source == event.source,
        d.event_id == event_id)).scalar_one()
    return EventDetail(
        event=fields, job=dict(job._mapping) if job else None,
        duplicates=int(duplicates),
        effects=hooks.effects_of(conn, hooks.Event(provider, event_id, event.event_type,
                                                    payload)),
        emails=_emails(conn, key),
    )


def _emails(conn: Connection, key: dict[str, str]) -> list[dict[str, Any]]:
    o = outbox.c
    rows = conn.execute(sa.select(o.id, o.idempotency_key, o.kind, o.status, o.to_address,
                                  o.attempts, o.last_error, o.message_id, o.created_at,
                                  o.sent_at)
                        .where(o.provider == key["provider"], o.event_id == key["event_id"])
                        .order_by(o.id))
    return [dict(row._mapping) for row in rows]


def events_per_hour(conn: Connection, hours: int = 24) -> list[tuple[datetime, int]]:
    """Events received per hour over the last `hours` hours, oldest first, every hour
    present (zero where none came)."""
    rows = conn.execute(sa.text("""
        SELECT hour, count(e.id) AS n
        FROM generate_series(date_trunc('hour', now()) - make_interval(hours => :hours - 1),
                             date_trunc('hour', now()), interval '1 hour') AS hour
        LEFT JOIN webhook_events e
          ON e.received_at >= hour AND e.received_at < hour + interval '1 hour'
        GROUP BY hour ORDER BY hour
    """), {"hours": hours})
    return [(row.hour, int(row.n)) for row in rows]


@dataclass(frozen=True)
class EmailRow:
    id: int
    idempotency_key: str
    kind: str
    status: str
    to_address: str
    provider: str | None
    event_id: str | None
    attempts: int
    last_error: str | None
    message_id: str | None
    created_at: datetime


def list_emails(conn: Connection, status: EmailStatus | None = None, *, limit: int = 50,
                before_id: int | None = None) -> list[EmailRow]:
    """Outbox emails newest first (by id), `limit` at a time, before `before_id`."""
    o = outbox.c
    query = sa.select(o.id, o.idempotency_key, o.kind, o.status, o.to_address, o.provider,
                      o.event_id, o.attempts, o.last_error, o.message_id, o.created_at)
    if status is not None:
        query = query.where(o.status == str(status))
    if before_id is not None:
        query = query.where(o.id < before_id)
    query = query.order_by(o.id.desc()).limit(max(1, min(limit, MAX_PAGE)))
    return [EmailRow(**row._mapping) for row in conn.execute(query)]
