"""Reconciliation: ask a provider's API which events exist and record the ones never
delivered, through the same operation as a delivery (shared.recording.record_event: one
transaction, ON CONFLICT dedup, a wake-up after commit). A delivery and a reconciliation
of one event, in either order or at the same moment, make one event row and one job.

Each provider whose record has an events API (shared/providers: Stripe, Paddle, GitHub)
lists its events since a time, a page of Listings at a time, and fetches a listed event's
payload (GitHub needs a second request per delivery; Stripe and Paddle list whole events).
Each page is recorded before the next is asked for, so an API error (4xx, 5xx, timeout)
that ends the run with ReconcileFailed keeps every page before it, and a run that keeps
failing late still moves forward. Pages
come oldest first where the API can page that way (Stripe forward in time from the
window's start, Paddle in ascending id order); GitHub lists newest first only. Within a
page, events are recorded oldest first. The payload recorded is the JSON the API served:
every number and string as served (Stripe's `*_decimal` fields stay strings).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.engine import Engine

from webhooks.shared import db, notifications, providers, queries, sources, wakeups
from webhooks.shared.errors import InvalidPayload, MissingVariable
from webhooks.shared.models import ReceivedVia
from webhooks.shared.providers.events_api import (
    EventsAPI,
    Fetched,
    Listing,
    PerAccount,
    ReconcileFailed,
)
from webhooks.shared.recording import Origin, record_event
from webhooks.shared.settings import Settings
from webhooks.shared.terminal import visible

log = logging.getLogger(__name__)

__all__ = ["EventsAPI", "Fetched", "Listing", "ReconcileFailed", "Result", "reconcile"]

DEFAULT_LOOKBACK = timedelta(hours=72)  # Stripe retries for 3 days
# The clock's runs overlap by this much: an event created just before a run's start but
# listed by the API only later is still in the next run's window.
MARGIN = timedelta(minutes=15)
CHECK_BATCH = 500  # event ids looked up in the database per statement
FAILING_RUNS = 3  # failed runs in a row of a source that make a reconcile.failing


@dataclass
class Result:
    provider: str
    since: datetime
    source: str = ""  # the source reconciled; "": the provider's default source
    listed: int = 0
    already: int = 0
    recorded: int = 0
    would_record: list[Listing] = field(default_factory=list)  # --dry-run
    # Events Postgres refuses to store (jsonb: \u0000, NaN), with why: skipped, named in
    # the run's error, never a run that stops at the same event for ever.
    skipped: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None

    def __post_init__(self) -> None:
        self.source = self.source or self.provider

    def summary(self) -> str:
        return f"listed {self.listed}, already recorded {self.already}, recorded {self.recorded}"


def source_for(settings: Settings, provider: str, name: str | None = None) -> EventsAPI:
    """The events API of the provider's source `name` (None: its default source), with
    that source's own credentials; MissingVariable without them, ValueError for a source
    that is not configured."""
    registered = registered_source(settings, provider, name)
    if registered is None:
        raise ValueError(f"no source {provider}/{name} is configured")
    return api_for(settings, registered)


def registered_source(settings: Settings, provider: str,
                      name: str | None = None) -> sources.Source | None:
    """The source from the registry; the default one even without a webhook secret (a
    provider reconciled only, its deliveries going elsewhere)."""
    found = settings.sources.get(provider, name)
    if found is None and name in (None, provider):
        return settings.default_source(provider)
    return found


def api_for(settings: Settings, source: sources.Source) -> EventsAPI:
    """A source's events API client, with the source's own credentials (its API key or
    token, and what else its provider's API needs); MissingVariable without them, naming
    the source's variable."""
    record = providers.get(source.provider)
    if record is None or record.events_api is None:
        raise ValueError(f"no reconciliation for {source.provider!r}")
    for option in record.events_api_needs:
        value = source.credentials if option is record.credentials else option.of(source)
        if not value:
            raise MissingVariable(sources.option_variable(source, option),
                                  f"reconciliation of {source.label} needs it")
    return record.events_api(source, settings.api_base(source.provider) or "")


def configured(settings: Settings) -> list[sources.Source]:
    """The sources whose API credentials are set, each reconciled with its own."""
    found = []
    for provider in providers.reconciled():
        candidates = settings.sources.of(provider)
        if settings.sources.get(provider) is None:
            candidates.insert(0, settings.default_source(provider))
        for candidate in candidates:
            try:
                api_for(settings, candidate)
            except MissingVariable:
                continue
            found.append(candidate)
    return found


def reconcile(engine: Engine, source: EventsAPI, provider: str, since: datetime, *,
              dry_run: bool = False, wake: Callable[[list[int]], object] | None = None,
              source_name: str | None = None) -> Result:
    """List the provider's events since `since` and record each one not yet recorded, page
    by page as the API answers, each page oldest first. `engine` is an autocommit engine
    (as the ingest's); `wake` sends the wake-ups for the new jobs. Raises ReconcileFailed
    on an API error, after recording every page before it: result.recorded counts them
    (attached to the error as .result). `source_name`: the source whose credentials list
    them and whose name the new rows record (None: the provider's default source)."""
    result = Result(provider, since, source=source_name or provider)
    seen: set[str] = set()
    if isinstance(source, PerAccount):
        source.add_accounts(_recorded_accounts(engine, provider, result.source))
    try:
        for page in source.pages(since):
            listings = sorted(_unique(page, seen), key=lambda item: item.created)
            result.listed += len(listings)
            recorded = _recorded(engine, provider, result.source,
                                 [item.event_id for item in listings])
            missing = [item for item in listings if item.event_id not in recorded]
            result.already += len(listings) - len(missing)
            if dry_run:
                result.would_record.extend(missing)
            else:
                _record(engine, source, missing, result, wake)
        if result.skipped:
            raise ReconcileFailed(_skipped_message(result))
    except ReconcileFailed as error:
        result.error = str(error)
        error.result = result  # type: ignore[attr-defined]
        raise
    return result


def _unique(listings: Iterable[Listing], seen: set[str]) -> Iterator[Listing]:
    """Each event once in a run (GitHub lists a redelivery under its original's guid;
    pages of a list that moved while it was read may overlap)."""
    for listing in listings:
        if listing.event_id not in seen:
            seen.add(listing.event_id)
            yield listing


def _recorded(engine: Engine, provider: str, source: str,
              event_ids: Sequence[str]) -> set[str]:
    """Of event_ids, those whose dedup keys are recorded (the source's, for a provider whose
    key holds its source)."""
    found: set[str] = set()
    if not event_ids:
        return found
    with db.transaction(engine) as conn:
        for start in range(0, len(event_ids), CHECK_BATCH):
            found.update(db.fetch_scalars_in(conn, queries.EventListRecorded, {
                "provider": provider, "source": source,
                "event_ids": list(event_ids[start:start + CHECK_BATCH])}))
    return found


def _recorded_accounts(engine: Engine, provider: str, source: str) -> list[str]:
    with db.transaction(engine) as conn:
        return list(db.fetch_scalars_in(conn, queries.EventListAccounts,
                                        {"provider": provider, "source": source}))


def _origin(provider: str, source: str, listing: Listing, payload: bytes) -> Origin:
    """What the event's row records of its origin: the source whose credentials listed it,
    and what the provider reads of an origin in a payload (its record's `origin`: Stripe's
    account, or the account it was listed for, and livemode)."""
    record = providers.get(provider)
    if record is None or record.origin is None:
        return Origin(source=source)
    try:
        account, livemode = record.origin(json.loads(payload))
    except (ValueError, AttributeError):
        account, livemode = None, None
    return Origin(source=source, account=account or listing.account, livemode=livemode)


def _record(engine: Engine, source: EventsAPI, missing: list[Listing], result: Result,
            wake: Callable[[list[int]], object] | None) -> None:
    provider = result.provider
    new_jobs: list[int] = []
    try:
        for listing in missing:
            event_type, payload = listing.event_type, listing.payload
            if payload is None or event_type is None:
                fetched = source.fetch(listing)
                event_type, payload = fetched.event_type, fetched.payload
            try:
                done = record_event(engine, provider, listing.event_id, event_type, payload,
                                    via=ReceivedVia.RECONCILE,
                                    origin=_origin(provider, result.source, listing,
                                                   payload))
            except InvalidPayload as error:
                result.skipped.append((listing.event_id, str(error)))
                log.error("event skipped by reconciliation: it cannot be stored",
                          extra={"provider": provider, "source": result.source,
                                 "event_id": listing.event_id,
                                 "error": str(error)})
                continue
            if done.duplicate:  # a delivery landed since the page was read
                result.already += 1
                continue
            result.recorded += 1
            log.info("event recorded by reconciliation",
                     extra={"provider": provider, "source": result.source,
                            "event_id": listing.event_id, "account": listing.account,
                            "event_type": event_type, "job_id": done.job_id})
            if done.job_id is not None:
                new_jobs.append(done.job_id)
                if wake is not None and len(new_jobs) >= wakeups.JOBS_PER_MESSAGE:
                    wake(new_jobs)
                    new_jobs = []
    finally:
        if wake is not None and new_jobs:
            wake(new_jobs)


def _skipped_message(result: Result) -> str:
    """The skipped events named, as the API listed them: their ids and reasons with control
    characters escaped (shared/terminal.py `visible`), as the run's error is printed by
    `webhooks reconcile` and kept as its last_error."""
    named = "; ".join(visible(f"{event_id} ({why})") for event_id, why in result.skipped[:3])
    more = f" and {len(result.skipped) - 3} more" if len(result.skipped) > 3 else ""
    return (f"{_label(result)}: {len(result.skipped)} event(s) skipped, they cannot be "
            f"stored: {named}{more}")


def _label(result: Result) -> str:
    return (result.provider if result.source == result.provider
            else f"{result.provider}/{result.source}")


def since_for_clock(engine: Engine, provider: str, source: str | None = None) -> datetime:
    """Where the clock's run of a source starts (None: the provider's default source):
    its last successful run's start less MARGIN, or DEFAULT_LOOKBACK ago. Marks this run
    as started. Each source has its own row: a Connect source failing late does not hold
    back the platform's own runs."""
    with db.transaction(engine) as conn:
        row = conn.execute(queries.ReconcileRunStart,
                           {"provider": provider, "source": source or provider}).first()
    last = row[0] if row else None
    if last is None:
        return datetime.now(UTC) - DEFAULT_LOOKBACK
    return min(last - MARGIN, datetime.now(UTC))


def record_run(engine: Engine, result: Result,
               settings: Settings | None = None) -> notifications.Queued:
    """Store the run's outcome; a success moves the next run's start. With settings, in
    the same transaction: `reconcile.found` for a run that recorded events (how many), and
    `reconcile.failing` for the third failed run in a row of the source (once a streak)."""
    with db.transaction(engine) as conn:
        in_a_row = conn.execute(queries.ReconcileRunFinish, {
            "provider": result.provider, "source": result.source, "error": result.error,
            "listed": result.listed, "recorded": result.recorded}).scalar()
        found = [] if settings is None else _run_notifications(result, in_a_row or 0)
        return notifications.record(conn, settings, found) if settings and found else (
            notifications.Queued())


def record_found(engine: Engine, result: Result, settings: Settings) -> notifications.Queued:
    """For a run of `webhooks reconcile`, which records no run (its --since is the
    operator's, and must not move the clock's next start): its `reconcile.found`, when it
    recorded events, in a transaction of its own after theirs."""
    if not result.recorded:
        return notifications.Queued()
    with db.transaction(engine) as conn:
        return notifications.record(conn, settings, _run_notifications(result, 0))


def _run_notifications(result: Result, in_a_row: int) -> list[notifications.Occurrence]:
    found = []
    if result.recorded:
        found.append(notifications.Occurrence(
            notifications.Kind.RECONCILE_FOUND, result.provider, result.source,
            count=result.recorded, extra={"listed": result.listed}))
    if result.error is not None and in_a_row == FAILING_RUNS:
        found.append(notifications.Occurrence(
            notifications.Kind.RECONCILE_FAILING, result.provider, result.source,
            count=in_a_row, error=result.error))
    return found
