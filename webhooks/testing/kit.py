"""The system, run in one process on a database of its own, for proving an app's handlers:
each step is the system's own code. A delivery is a signed POST through the ingest's app
(its verification and recording); a drain is the worker's batches (`process_batch`, their
claim, lock order, rollback and one-at-a-time rerun); a reconciliation is
`shared/reconciliation.py` `reconcile` reading an events API that lists the event; a replay
is `shared/replay.py`. What the kit adds: faults at the handler's edge (a handler's run that
raises after it ran, two batches' handlers held until both have run), and a guard that
fails a handler that opens a network connection.
"""

from __future__ import annotations

import logging
import secrets
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from webhooks import migrate
from webhooks.ingest.app import create_app
from webhooks.shared import audit, db, handlers, hooks, reconciliation, replay
from webhooks.shared.models import dedup_generations
from webhooks.shared.models import metadata as core_metadata
from webhooks.shared.providers import PROVIDERS
from webhooks.shared.providers.events_api import Fetched, Listing
from webhooks.shared.settings import Settings
from webhooks.testing.events import Event
from webhooks.worker import jobs

MAX_ATTEMPTS = 2  # a job's attempts before it is failed (a replay schedule exhausts them)
HOLD_SECONDS = 0.25  # how long a batch's handler waits for the other batch's (two at once)
UNTIL_REPLAYED = -1  # a failure armed for every run until the failed jobs are replayed
DRAIN_SECONDS = 30.0  # a drain that leaves jobs pending longer: a handler that never ends
LOG = logging.getLogger("webhooks")
EMAILS = "emails queued"  # the snapshot's name for the outbox, compared by key
EMAIL_COLUMNS = ("idempotency_key", "kind", "to_address", "subject", "text_body", "html_body")
CALLS = "calls queued"  # and the calls, by key (the kit makes none)
CALL_COLUMNS = ("key", "target", "method", "path", "params")


class KitError(Exception):
    """The kit could not run a step (a delivery refused, a drain that never ends)."""


class InjectedFailure(Exception):
    """A failure the kit injects after a handler ran: its transaction rolls back."""


@dataclass(frozen=True)
class Reached:
    """A handler that opened a network connection."""

    handlers: tuple[str, ...]
    event: str
    address: str

    def __str__(self) -> str:
        return (f"{' and '.join(self.handlers)} opened a network connection to {self.address} "
                f"while applying {self.event}: a handler must queue an email "
                "(ctx.queue_email) instead, which commits with its job and is sent once")


Rows = dict[str, list[tuple[Any, ...]]]


@dataclass
class Snapshot:
    """What the apps left: each table's rows (the columns compared, as a sorted list), and
    the emails and the calls queued, by key."""

    tables: Rows
    columns: dict[str, tuple[str, ...]]

    def differences(self, other: Snapshot) -> dict[str, tuple[list[tuple[Any, ...]],
                                                           list[tuple[Any, ...]]]]:
        """By table: the rows only here, and the rows only in `other` (counted: a row twice
        in one and once in the other is one row only in the first)."""
        found = {}
        for table in sorted(set(self.tables) | set(other.tables)):
            mine, theirs = Counter(self.tables.get(table, [])), Counter(other.tables.get(table, []))
            only_mine, only_theirs = sorted((mine - theirs).elements(), key=repr), sorted(
                (theirs - mine).elements(), key=repr)
            if only_mine or only_theirs:
                found[table] = (only_mine, only_theirs)
        return found


@dataclass
class _Faults:
    """The faults armed for a schedule, and what the guard saw."""

    failures: dict[str, int] = field(default_factory=dict)  # event id: runs left to fail
    held: threading.Barrier | None = None  # two batches' handlers, held until both ran
    reached: list[Reached] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


_local = threading.local()  # .job: the event a handler of this thread is applying


class Kit:
    """The system on `url` (a database of the kit's own: every table is emptied between
    runs) with `apps` running, each provider's default source configured with a secret
    the kit signs with. Use as a context manager; `close()` restores the apps that ran."""

    def __init__(self, url: str, apps: Sequence[str], *, ignore: Iterable[str] = (),
                 max_attempts: int = MAX_ATTEMPTS) -> None:
        self.secrets = {name: record.secret_format.generate()
                        for name, record in PROVIDERS.items()}
        env = {"DATABASE_URL": url, "WEBHOOK_HANDLERS": ",".join(apps),
               "JOB_RETRY_BASE_SECONDS": "0", "JOB_MAX_ATTEMPTS": str(max_attempts),
               **{record.secret_variable: self.secrets[name]
                  for name, record in PROVIDERS.items()}}
        self.settings = Settings.from_env(env)
        self._previous_apps = hooks.running()
        self.apps = hooks.load(self.settings.handler_modules)
        self.engine = db.create_engine(self.settings, pool_size=4)
        try:
            self._migrate(apps)
        except Exception:
            self.engine.dispose()
            hooks.load(self._previous_apps)
            raise
        self.app = create_app(self.settings, threads=4)
        self.app.extensions["waker"] = _NoWakeUps()  # the kit drains itself
        self.recording = self.app.extensions["engine"]
        self.tables = self._app_tables()
        everything = sa.MetaData()
        everything.reflect(self.engine, only=[*self.tables, *core_metadata.tables])
        # Every table but the dedup generations (the current one is where keys go).
        self._emptying = "; ".join(f"DELETE FROM {_quoted(table.name)}"
                                   for table in reversed(everything.sorted_tables)
                                   if table.name != dedup_generations.name)
        self.columns = self._compared_columns(set(ignore))
        self.ignored = sorted(ignore)
        self.faults = _Faults()
        self._patched: list[tuple[Any, str, Any]] = []
        self._patch()
        # The system's own log lines (a retry, a rolled-back batch) are the schedules'
        # doing: the report says what matters.
        self._log_level = LOG.level
        LOG.setLevel(logging.CRITICAL)

    def __enter__(self) -> Kit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched.clear()
        LOG.setLevel(self._log_level)
        self.recording.dispose()
        self.engine.dispose()
        hooks.load(self._previous_apps)

    # --- steps --------------------------------------------------------------------------

    def reset(self) -> None:
        """Every table empty, the core's and the apps' (DELETE, which costs a few rows'
        work, not TRUNCATE's per-table files: the identities go on, and are not compared)."""
        with db.transaction(self.engine) as conn:
            conn.exec_driver_sql(self._emptying)
        self.faults = _Faults()

    def deliver(self, event: Event, source: str | None = None) -> dict[str, Any]:
        """The event delivered through the ingest: signed for the provider's source, as the
        provider signs it. Its answer (200: recorded, or a duplicate)."""
        record = PROVIDERS[event.provider]
        body = event.body()
        headers = record.signed_as(body, self.secrets[event.provider], time.time(),
                                   event.event_id, event.event_type)
        path = event.provider if source is None else f"{event.provider}/{source}"
        answer = self.app.test_client().post(f"/webhooks/{path}", data=body, headers=headers)
        if answer.status_code != 200:
            raise KitError(f"the ingest refused {event}: {answer.status_code} "
                           f"{answer.get_data(as_text=True)[:300]}")
        return dict(answer.get_json())

    def reconcile(self, event: Event) -> reconciliation.Result:
        """The event recorded by reconciliation, as the clock's run records one the
        provider's events API lists and the database does not hold."""
        return reconciliation.reconcile(self.recording, _Listed(event), event.provider,
                                        datetime.fromtimestamp(0, UTC))

    def at_once(self, *steps: Any) -> list[Any]:
        """The steps (callables) run in threads of their own, released together."""
        start = threading.Barrier(len(steps))
        results: list[Any] = [None] * len(steps)
        errors: list[BaseException] = []

        def run(index: int, step: Any) -> None:
            try:
                start.wait(timeout=10)
                results[index] = step()
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=run, args=(index, step))
                   for index, step in enumerate(steps)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return results

    def drain(self) -> None:
        """The worker's batches until no job is pending: a failed attempt is retried at
        once (JOB_RETRY_BASE_SECONDS=0), a job that runs out of attempts is failed."""
        deadline = time.monotonic() + DRAIN_SECONDS
        while self._pending():
            result = jobs.process_batch(self.engine, self.settings, limit=jobs.BATCH_SIZE)
            if not result.claimed and time.monotonic() > deadline:
                raise KitError(f"jobs still pending after {DRAIN_SECONDS:.0f} s of draining")

    def two_batches(self, lead: int = 0) -> None:
        """The jobs due, two batches at a time, from two connections, a job each, their
        handlers held until both have run: two workers applying two events of one object at
        the same moment. A handler that waits for the other's lock lets the first go after
        HOLD_SECONDS. `lead`: jobs run alone first (so that other jobs fall in pairs)."""
        for _ in range(lead):
            jobs.process_batch(self.engine, self.settings, limit=1)
        while self._pending() >= 2:
            held = self.faults.held = threading.Barrier(2)

            def batch(held: threading.Barrier = held) -> None:
                try:
                    jobs.process_batch(self.engine, self.settings, limit=1)
                finally:
                    held.abort()  # this batch is done: the other's handler waits no more

            try:
                self.at_once(batch, batch)
            finally:
                self.faults.held = None
        self.drain()

    def fail(self, event: Event, runs: int | None = None) -> None:
        """The event's next `runs` handler runs raise, after the handlers ran (None: every
        run until the next replay)."""
        self.faults.failures[event.event_id] = UNTIL_REPLAYED if runs is None else runs

    def failed(self) -> list[str]:
        """The failed jobs: their events and last errors."""
        with self.engine.connect() as conn:
            return [f"{provider} {event_id} ({event_type}): {error}" for provider, event_id,
                    event_type, error in conn.execute(sa.text(
                        "SELECT provider, event_id, event_type, coalesce(last_error, '') "
                        "FROM jobs WHERE status = 'failed' ORDER BY id"))]

    def replay_failed(self) -> int:
        """Every failed job made pending again (`webhooks replay --all-failed`); the
        failures armed until a replay end."""
        with self.faults.lock:
            for event_id, left in list(self.faults.failures.items()):
                if left == UNTIL_REPLAYED:
                    del self.faults.failures[event_id]
        return len(replay.replay(self.engine, replay.ReplayFilter(all_failed=True),
                                 dry_run=False).job_ids)

    # --- what is compared ---------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        tables: Rows = {}
        with self.engine.connect() as conn:
            for table, columns in self.columns.items():
                if table == EMAILS:
                    statement = f"SELECT {', '.join(EMAIL_COLUMNS)} FROM outbox"
                elif table == CALLS:
                    statement = "SELECT key, target, method, path, params::text FROM calls"
                else:
                    statement = (f"SELECT {', '.join(_quoted(c) for c in columns)} "
                                 f"FROM {_quoted(table)}")
                tables[table] = sorted((tuple(row) for row in conn.execute(sa.text(statement))),
                                       key=repr)
        return Snapshot(tables, self.columns)

    def audit(self) -> list[str]:
        """The violations of every audit check, the core's and the running apps'."""
        return [f"{violation.check}: {violation.finding.message}"
                for violation in audit.audit(self.engine).violations]

    # --- set-up -------------------------------------------------------------------------

    def _migrate(self, apps: Sequence[str]) -> None:
        engine = sa.create_engine(db.database_url(self.settings), poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                migrate.upgrade(conn, migrate.app_modules(apps))
        finally:
            engine.dispose()

    def _app_tables(self) -> list[str]:
        """The tables the apps' migrations made: every table but the core's (and their
        partitions) and the version tables."""
        names = sa.inspect(self.engine).get_table_names()
        with self.engine.connect() as conn:
            core_partitions = migrate.partition_names(conn)
        return sorted(name for name in names if name not in core_metadata.tables
                      and name not in core_partitions and not name.startswith("alembic_version"))

    def _compared_columns(self, ignore: set[str]) -> dict[str, tuple[str, ...]]:
        """Each app table's columns but those that differ by nature between two runs of
        the same events (identities and serials, times defaulted to now()) and those
        `ignore` names (`TABLE.COLUMN`)."""
        found: dict[str, tuple[str, ...]] = {}
        with self.engine.connect() as conn:
            for table in self.tables:
                columns = conn.execute(sa.text(
                    "SELECT column_name, is_identity, coalesce(column_default, '') "
                    "FROM information_schema.columns WHERE table_name = :t "
                    "AND table_schema = current_schema() ORDER BY ordinal_position"),
                    {"t": table}).all()
                found[table] = tuple(
                    name for name, identity, default in columns
                    if f"{table}.{name}" not in ignore and not _by_nature(identity, default))
        unknown = ignore - {f"{table}.{column}" for table in self.tables
                            for column in _all_columns(self.engine, table)}
        if unknown:
            raise KitError(f"--ignore names no column of the apps' tables: "
                           f"{', '.join(sorted(unknown))}")
        found[EMAILS] = EMAIL_COLUMNS
        found[CALLS] = CALL_COLUMNS
        return found

    def ignore(self, columns: Iterable[str]) -> None:
        """Leave out `TABLE.COLUMN`s (and those that differ by nature) from now on."""
        self.columns = self._compared_columns(set(columns))
        self.ignored = sorted(columns)

    def left_out(self) -> list[str]:
        """The `TABLE.COLUMN`s not compared: by nature, or ignored."""
        return sorted(f"{table}.{column}" for table in self.tables
                      for column in _all_columns(self.engine, table)
                      if column not in self.columns[table])

    def _pending(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.text(
                "SELECT count(*) FROM jobs WHERE status = 'pending'")).scalar_one())

    def _patch(self) -> None:
        """The handlers' edge: the faults armed, and the network guard."""
        original = jobs._outcome
        faults = lambda: self.faults  # noqa: E731 - the faults of the schedule running

        def outcome(ctx: handlers.JobContext, apps: list[tuple[str, handlers.Handler]]) -> str:
            _local.job = (ctx, tuple(_name(function) for _, function in apps))
            try:
                result = original(ctx, apps)
            finally:
                _local.job = None
            armed = faults()
            if armed.held is not None:
                try:
                    armed.held.wait(timeout=HOLD_SECONDS)
                except threading.BrokenBarrierError:
                    pass
            with armed.lock:
                left = armed.failures.get(ctx.event_id, 0)
                if left > 0:
                    armed.failures[ctx.event_id] = left - 1
            if left:
                raise InjectedFailure(f"injected after the handlers of {ctx.event_id} ran")
            return result

        self._replace(jobs, "_outcome", outcome)
        for name in ("connect", "connect_ex"):
            self._replace(socket.socket, name, _guarded(getattr(socket.socket, name), faults))

    def _replace(self, owner: Any, name: str, value: Any) -> None:
        self._patched.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)


def _guarded(connect: Any, faults: Any) -> Any:
    """socket.connect, refused (and noted) inside a handler."""
    def guarded(sock: socket.socket, address: Any) -> Any:
        job = getattr(_local, "job", None)
        if job is None:
            return connect(sock, address)
        ctx, names = job
        reached = Reached(names, f"{ctx.provider} {ctx.event_id} ({ctx.event_type})",
                          _address(address))
        with faults().lock:
            faults().reached.append(reached)
        raise ConnectionRefusedError(f"webhooks check-handlers: {reached}")

    return guarded


def _address(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def _name(function: Any) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def _by_nature(identity: str, default: str) -> bool:
    default = default.lower()
    return identity == "YES" or default.startswith("nextval(") or "now()" in default \
        or "current_timestamp" in default or "clock_timestamp()" in default


def _all_columns(engine: Engine, table: str) -> list[str]:
    return [column["name"] for column in sa.inspect(engine).get_columns(table)]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _NoWakeUps:
    """The ingest's waker, for a kit that drains itself."""

    def wake(self, job_id: int) -> None:
        pass

    def close(self, timeout: float = 0) -> None:
        pass


class _Listed:
    """An events API that lists one event, whole (reconciliation's EventsAPI)."""

    def __init__(self, event: Event) -> None:
        self.event = event

    def pages(self, since: datetime) -> Iterator[list[Listing]]:
        yield [Listing(self.event.event_id, datetime.now(UTC), self.event.event_type,
                       self.event.body())]

    def fetch(self, listing: Listing) -> Fetched:
        return Fetched(self.event.event_type, self.event.body())


# --- a database of the kit's own ------------------------------------------------------------


@contextmanager
def database(url: str | None) -> Iterator[str]:
    """A new database, dropped at the end: on the server of `url` (DATABASE_URL), else on
    an embedded Postgres started for the run (the `testing` extra's pgserver)."""
    if url is not None:
        with _new_database(url) as created:
            yield created
        return
    from webhooks import embedded

    with tempfile.TemporaryDirectory(prefix="webhooks-check-") as folder:
        from pathlib import Path

        server = embedded.start_postgres(Path(folder))
        try:
            with _new_database(server) as created:
                yield created
        finally:
            embedded.stop_postgres(Path(folder))


@contextmanager
def _new_database(url: str) -> Iterator[str]:
    name = f"webhooks_check_{secrets.token_hex(4)}"
    server = sa.make_url(db.sqlalchemy_url(url))
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        try:
            yield server.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def describe_rows(columns: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> list[str]:
    """Rows as `column=value` lines, for a report."""
    return [", ".join(f"{column}={value!r}" for column, value in zip(columns, row, strict=False))
            for row in rows]

