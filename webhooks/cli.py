"""The `webhooks` command. Every subcommand validates Settings first: a bad environment
variable stops it with one line naming the variable (exit 2).

The Procfile's processes (`migrate`, `web`, `worker`, `clock`, `console`) never start an
embedded server: without DATABASE_URL (or BROKER_URL) they exit 1 at once, naming the
variable. The operators' commands (`stats`, `replay`, `prune`, `events`, `show`,
`audit`, `reconcile`) use the database of a `webhooks dev` running in the current folder when
DATABASE_URL is unset. Failures exit 1,
bad usage 2.
"""

from __future__ import annotations

# First: a Procfile process handles SIGTERM from its first instant (webhooks/starting.py).
from webhooks import starting

# isort: split
import functools
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar

import click
from sqlalchemy.engine import Engine

from webhooks.shared import providers
from webhooks.shared.errors import ConfigError, DatabaseUnavailable, MissingVariable, WebhooksError
from webhooks.shared.models import CallStatus, JobStatus, NotificationKind, NotificationStatus
from webhooks.shared.settings import Settings
from webhooks.shared.terminal import visible

T = TypeVar("T")
ANY_INTERFACE = "0.0.0.0"  # noqa: S104 - a deployed web serves the platform's router
# The console and the worker metrics answer on loopback unless told otherwise: the console
# shows payloads and customer emails over Basic auth, the metrics have no auth at all.
LOOPBACK = "127.0.0.1"


def load_settings() -> Settings:
    """The settings; a bad value exits 2, a missing one (a named source's secret) 1."""
    try:
        return Settings.from_env()
    except MissingVariable as error:
        fail(str(error))
    except ConfigError as error:
        fail(str(error), code=2)


def procfile_settings(*, broker: bool = True) -> Settings:
    """Settings of a Procfile process: DATABASE_URL (and BROKER_URL) must be set."""
    settings = load_settings()
    try:
        settings.require_servers(broker=broker)
    except MissingVariable as error:
        fail(str(error))
    return settings


def process_settings(settings: Settings | None = None) -> Settings:
    """Settings of a long-running Procfile process (`web`, `worker`, `clock`, `console`):
    procfile_settings, logging configured, and the start-up check of the path to the
    database (shared/pooler.py: a pooler in transaction mode that DATABASE_POOLER does not
    name is one WARNING line; one it names refuses DATABASE_URL's own startup options,
    exit 2 with one line), then the apps (start_apps). `settings`: procfile_settings
    already read, by a process that checks more of its own variables first."""
    settings = settings or procfile_settings()
    from webhooks.shared import pooler
    from webhooks.shared.logs import configure_logging

    refused = pooler.url_options_refused(settings)
    if refused is not None:
        fail(refused, code=2)
    configure_logging(settings)
    pooler.warn_if_unnamed(settings)
    start_apps(settings)
    return settings


def start_apps(settings: Settings, *, database: bool = True) -> tuple[str, ...]:
    """The apps the settings name, imported and checked (shared.hooks.load): a module that
    fails to import, or two apps with a lock key for one provider, exit 1 with one line.
    Each WARNING of shared.hooks.warnings_at_start is logged (`database`: the reference
    app's rows looked for; a database that does not answer is not asked)."""
    import logging

    import sqlalchemy as sa

    from webhooks.shared import db, hooks

    apps = load_apps(settings.handler_modules)
    conn = None
    engine = db.create_engine(settings, pool_size=1) if database else None
    try:
        conn = engine.connect() if engine is not None else None
    except (sa.exc.SQLAlchemyError, DatabaseUnavailable):
        conn = None
    try:
        for line in hooks.warnings_at_start(conn, apps):
            logging.getLogger("webhooks.apps").warning(line)
    finally:
        if conn is not None:
            conn.close()
        if engine is not None:
            engine.dispose()
    return apps


def load_apps(modules: tuple[str, ...]) -> tuple[str, ...]:
    """The apps `modules` (WEBHOOK_HANDLERS) name, then the entry points' (shared.hooks.load),
    imported and running; a module that fails to import, or two apps with a lock key for
    one provider, exit 1 with one line."""
    from webhooks.shared import hooks
    from webhooks.shared.errors import AppConflict, AppNotLoaded

    try:
        return hooks.load(modules)
    except (AppConflict, AppNotLoaded) as error:
        fail(f"WEBHOOK_HANDLERS: {error}")


def local_settings() -> Settings:
    """Settings of an operator's command: DATABASE_URL, else the database (and broker) of
    a `webhooks dev` running in this folder, else exit 1 naming the variable."""
    settings = load_settings()
    if settings.database_url is not None:
        return settings
    from webhooks import embedded

    try:
        database = embedded.running_postgres_url(settings.data_dir)
        broker = settings.broker_url or embedded.running_broker_url(settings.data_dir)
    except RuntimeError as error:  # the dev extra is not installed
        fail(f"DATABASE_URL: not set ({error})")
    if database is None:
        fail("DATABASE_URL: not set, and no `webhooks dev` runs in this folder")
    return replace(settings, database_url=database, broker_url=broker)


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr and exit `code`. The message can quote data (an API's error body,
    an event id an API listed, a value given on the command line): its control characters
    are printed escaped (shared/terminal.py `visible`), so the line stays one line and
    drives no terminal (tests/integration/test_reconcile.py
    test_the_reconcile_commands_failure_lines_escape_what_the_api_sent)."""
    click.echo(f"webhooks: {visible(message)}", err=True)
    sys.exit(code)


def source_of(settings: Settings, text: str, *, whole: bool = True) -> tuple[str, str | None]:
    """PROVIDER (whole: every source of it, name None) or PROVIDER/SOURCE, checked against
    the registry (Settings.sources): anything else is bad usage, exit 2 with one line.
    `stripe/stripe` names the default source alone (`pause stripe/stripe` holds it, not
    the named ones)."""
    provider, slash, name = text.partition("/")
    if not slash and whole and provider in providers.PROVIDERS:
        return provider, None
    found = settings.sources.get(provider, name or None) if name or not slash else None
    if found is None:
        known = ", ".join(sorted(source.label for source in settings.sources))
        fail(f"{text!r} is not a configured source (configured: {known or 'none'})", 2)
    return found.provider, found.name


def _engine(settings: Settings) -> Engine:
    from webhooks.shared import db

    return db.create_engine(settings, pool_size=2)


def _database(action: Callable[[], T]) -> T:
    import sqlalchemy as sa

    try:
        return action()
    except (sa.exc.OperationalError, DatabaseUnavailable) as error:
        fail(f"database unavailable: {str(error).splitlines()[0]}")
    except sa.exc.DBAPIError as error:  # a refusal (permissions, a missing table): one line
        fail(f"database error: {str(error.orig or error).splitlines()[0]}")


@contextmanager
def _metrics_folder(settings: Settings, kind: str) -> Iterator[None]:
    """PROMETHEUS_MULTIPROC_DIR for the server (or worker) processes this one starts, unless
    it is set: a new temporary folder, removed when the server returns, as it does on
    SIGTERM or SIGINT once its processes have stopped. Only by this process: the ones it
    forks exit without running this. prometheus_client reads the variable once, when it is
    imported: import nothing that loads it before entering."""
    if settings.prometheus_multiproc_dir is not None:
        yield
        return
    folder = tempfile.mkdtemp(prefix=f"webhooks-{kind}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
    owner = os.getpid()
    try:
        yield
    finally:
        if os.getpid() == owner:
            shutil.rmtree(folder, ignore_errors=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
def main(ctx: click.Context) -> None:
    """Apply payment and subscription webhooks exactly once."""
    if ctx.invoked_subcommand in starting.SERVING:
        # Taken at import when run as a command; here too when run in-process (a test's
        # runner), and put back when the command returns.
        previous = starting.take_charge()
        ctx.call_on_close(lambda: signal.signal(signal.SIGTERM, previous))


# --- the Procfile's processes -------------------------------------------------------


@main.command()
@click.option("--check", is_flag=True,
              help="Apply nothing: exit 1 naming each history not at its head and each "
                   "difference between the database and the declared tables.")
def migrate(check: bool) -> None:
    """Apply database migrations (safe to run again): the Procfile's `release`. The core's,
    then those of each app WEBHOOK_HANDLERS (then an entry point) names, each app's a
    history of its own (webhooks/migrate.py)."""
    settings = procfile_settings(broker=False)
    import sqlalchemy as sa

    from webhooks import migrate as migrations
    from webhooks.shared.db import database_url

    modules = migrations.app_modules(settings.handler_modules)
    engine = sa.create_engine(database_url(settings), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            if check:
                problems = migrations.check(conn, modules)
            else:
                applied = migrations.upgrade(conn, modules)
    except Exception as error:  # a one-line reason, not a traceback
        fail(f"migration failed: {(str(error).splitlines() or [repr(error)])[0]}")
    finally:
        engine.dispose()
    if check:
        for problem in problems:
            click.echo(problem, err=True)
        if problems:
            fail(f"{len(problems)} difference(s) between the database and the code")
        click.echo("database matches the migrations and the declared tables")
        return
    for step in applied:
        click.echo(step.line())
    click.echo("database is at the latest migration")


@main.command()
@click.option("--workers", type=click.IntRange(1), default=None,
              help="Server processes (default $WEB_CONCURRENCY, else 2).")
@click.option("--threads", type=click.IntRange(1), default=None,
              help="App threads per process (default $WEB_THREADS, else 4).")
@click.option("--host", default=ANY_INTERFACE, show_default=True,
              help="Interface to listen on ($PORT is the port).")
def web(workers: int | None, threads: int | None, host: str) -> None:
    """The ingest HTTP server (granian) on $PORT."""
    settings = process_settings()
    with _metrics_folder(settings, "web"):  # set before prometheus_client is imported
        from webhooks.ingest.server import serve

        serve(settings, workers=workers or settings.web_concurrency,
              threads=threads or settings.web_threads, host=host)


@main.command()
@click.option("--processes", type=click.IntRange(1), default=2, show_default=True)
@click.option("--threads", type=click.IntRange(1), default=3, show_default=True,
              help="Threads per process. While emails keep coming, one runs the outbox "
                   "loop (and waits on Postmark); the others apply jobs.")
def worker(processes: int, threads: int) -> None:
    """Dramatiq workers: job processing and outbox dispatch."""
    settings = process_settings()
    # The longest a worker thread waits for its next message before it looks whether it
    # should stop (ms); idle consumers wait for the broker's notices
    # (shared/redis_broker.py IDLE_WAIT_SECONDS).
    os.environ.setdefault("dramatiq_worker_timeout", "100")
    sys.argv = ["dramatiq", "webhooks.worker.actors", "--processes", str(processes),
                "--threads", str(threads), "--worker-shutdown-timeout", "30000"]
    with _metrics_folder(settings, "worker"):  # set before prometheus_client is imported
        from dramatiq.cli import HANDLED_SIGNALS
        from dramatiq.cli import main as dramatiq_main

        # Dramatiq blocks its stop signals while it starts its processes and unblocks them
        # once its handler is set, in the main thread. Blocked here first, so that the
        # metrics server's thread inherits the block: a stop sent meanwhile waits for that
        # handler, instead of reaching the thread, where it would end the main process
        # and leave its worker processes running (or, as PID 1, be dropped).
        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        _serve_worker_metrics(settings)
        code = dramatiq_main()
    sys.exit(code)


def _serve_worker_metrics(settings: Settings) -> None:
    """/metrics for the worker processes (aggregated over them) on WORKER_METRICS_PORT
    (0 disables), on WORKER_METRICS_HOST. A port already taken, by another worker on the
    same host, is logged and skipped: that worker's /metrics already serves this host."""
    port, host = settings.worker_metrics_port, settings.worker_metrics_host
    if not port:
        return
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as error:
        click.echo(f"webhooks: worker metrics not served on port {port}: {error}", err=True)


@main.command()
def clock() -> None:
    """Periodic tasks: sweeper (lost wake-ups, retries) and nightly retention."""
    settings = process_settings()
    from webhooks.clock.schedule import run

    run(settings)


# --- development --------------------------------------------------------------------


@main.command()
def dev() -> None:
    """The whole system, with embedded Postgres and broker unless URLs are set."""
    settings = load_settings()
    from webhooks.console.settings import ConsoleSettings

    try:
        ConsoleSettings.from_env()  # the console it starts would stop at a bad one
    except ConfigError as error:
        fail(str(error), code=2)
    # The apps its processes will run, checked before anything starts: a module that fails
    # to import is one line here, not each process's after a banner.
    from webhooks.shared.hooks import REFERENCE_APP

    load_apps(settings.handler_modules if "WEBHOOK_HANDLERS" in os.environ
              else (REFERENCE_APP,))
    from webhooks.dev import run

    try:
        sys.exit(run(settings))
    except RuntimeError as error:  # the dev extra is not installed
        fail(str(error))


@main.command()
@click.argument("target", metavar="PROVIDER[/SOURCE]")
@click.argument("file", type=click.File("rb"))
@click.option("--url", help="Default: the local ingest, "
              "http://127.0.0.1:$PORT/webhooks/PROVIDER[/SOURCE].")
@click.option("--secret", help="Default: the source's secret variable, or the dev secret.")
@click.option("--repeat", type=click.IntRange(1), default=1, show_default=True)
@click.option("--concurrency", type=click.IntRange(1), default=1, show_default=True)
@click.option("--header", "extra_headers", multiple=True, help="Extra 'Name: value' header.")
def send(target: str, file: Any, url: str | None, secret: str | None, repeat: int,
         concurrency: int, extra_headers: tuple[str, ...]) -> None:
    """Sign FILE with the source's secret and POST it to the source's URL: a signed test
    delivery (PROVIDER: its default source)."""
    settings = load_settings()
    from webhooks.dev import dev_secrets
    from webhooks.send import post, signed_headers

    provider, name = _sending_source(settings, target)
    found = settings.sources.get(provider, name)
    secret = secret or (found.secrets[0] if found and found.secrets else None)
    if secret is None:  # the default source of a provider with no secret set: dev's
        secret = dev_secrets(settings.data_dir)[providers.PROVIDERS[provider].secret_variable]
    path = provider if name in (None, provider) else f"{provider}/{name}"
    body = file.read()
    headers = signed_headers(provider, body, secret)
    for raw in extra_headers:
        name, _, value = raw.partition(":")
        headers[name.strip()] = value.strip()
    answers = post(url or f"http://127.0.0.1:{settings.port}/webhooks/{path}", body, headers,
                   repeat, concurrency)
    for answer in answers:
        click.echo(f"{answer.status} {answer.body}")
    if any(not 200 <= answer.status < 300 for answer in answers):
        sys.exit(1)


def _sending_source(settings: Settings, target: str) -> tuple[str, str | None]:
    """A provider's default source even when it has no secret (dev's secret signs), or a
    configured named source."""
    if target in providers.PROVIDERS:
        return target, None
    return source_of(settings, target, whole=False)


# --- operators' commands ------------------------------------------------------------


@main.command()
@click.option("--job", "job_ids", type=int, multiple=True, help="A failed job id (repeatable).")
@click.option("--all", "all_failed", is_flag=True, help="Every failed job matching the filters.")
@click.option("--provider", help=f"One provider ({', '.join(providers.names())}).")
@click.option("--type", "event_type")
@click.option("--since", type=click.DateTime(), help="Jobs created at or after this time.")
@click.option("--dry-run", is_flag=True, help="Show how many, change nothing.")
def replay(job_ids: tuple[int, ...], all_failed: bool, provider: str | None,
           event_type: str | None, since: datetime | None, dry_run: bool) -> None:
    """Move failed jobs back to pending and enqueue them."""
    if bool(job_ids) == all_failed:
        raise click.UsageError("give --job ID (repeatable) or --all, not both")
    if job_ids and (provider or event_type or since):
        raise click.UsageError("--provider, --type and --since go with --all")
    settings = local_settings()
    from webhooks.shared.replay import ReplayFilter
    from webhooks.shared.replay import replay as run_replay

    spec = ReplayFilter(job_ids, all_failed, provider, event_type, since)
    try:
        plan = _database(lambda: run_replay(_engine(settings), spec, dry_run=dry_run))
    except WebhooksError as error:
        fail(str(error))
    for job_id in plan.skipped_pending:
        click.echo(f"job {job_id} is already pending; skipped", err=True)
    if dry_run:
        click.echo(f"would replay {len(plan.job_ids)} job(s)")
        return
    _wake(settings, job_ids=plan.job_ids)
    click.echo(f"replayed {len(plan.job_ids)} job(s)")


def _wake(settings: Settings, *, job_ids: list[int] | None = None, due: int = 0) -> None:
    """Wake workers for these jobs (or for `due` jobs), one wake-up per claim's worth;
    without a reachable broker the clock's sweeper will."""
    if not job_ids and not due:
        return
    if settings.broker_url is None:
        click.echo("no broker running; the clock will pick the jobs up", err=True)
        return
    from webhooks.shared import wakeups

    broker = wakeups.create_broker(settings)
    ok = (wakeups.wake_jobs(broker, job_ids) if job_ids
          else wakeups.wake_due_jobs(broker, due))
    if not ok:
        click.echo("broker unreachable; the clock will pick the jobs up", err=True)


@main.command()
@click.option("--days", type=click.IntRange(1), default=None,
              help="Age in days (default RETENTION_DAYS).")
def prune(days: int | None) -> None:
    """Delete finished events and jobs older than --days."""
    settings = local_settings()
    from webhooks.shared.retention import prune as run_prune

    days = days or settings.retention_days
    pruned = _database(lambda: run_prune(_engine(settings), days, settings.dedup_horizon_days))
    click.echo(f"pruned {pruned.events} finished event(s) older than {days} day(s)")
    if pruned.partitions or pruned.kept:
        click.echo(f"dropped {pruned.partitions} partition(s); kept {pruned.kept} unfinished "
                   "job(s) and their events")


@main.command()
@click.option("--days", type=click.IntRange(1), default=14, show_default=True)
def stats(days: int) -> None:
    """Per day: events received, duplicates, jobs done and failed, emails."""
    settings = local_settings()
    from webhooks.shared import stats as daily_stats

    table = _database(lambda: daily_stats.daily(_engine(settings), days))
    click.echo(daily_stats.render(table))
    from webhooks.shared import pausing

    def read_paused() -> list[pausing.Pause]:
        with _engine(settings).connect() as conn:
            return pausing.paused(conn)

    for paused in _database(read_paused):
        click.echo(f"paused: {paused.label} since {paused.since:%Y-%m-%d %H:%M:%S %Z} "
                   f"(`webhooks resume {paused.label}`)")


_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_duration(text: str) -> timedelta | None:
    """`90s`, `15m`, `1h`, `2d` as a timedelta; None for anything else. OverflowError for a
    duration past timedelta's range."""
    match = _DURATION.match(text.strip())
    if match is None:
        return None
    return timedelta(**{_UNITS[match[2]]: int(match[1])})


class Duration(click.ParamType):
    """A duration: a whole number and its unit, `900s`, `15m`, `1h`, `2d`."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            duration = parse_duration(str(value))
        except OverflowError:
            duration = None
        if duration is None:
            self.fail(f"{value!r} is not a duration (900s, 15m, 1h, 2d)", param, ctx)
        return duration


class Moment(click.ParamType):
    """A date or time: ISO 8601 (`2026-11-30`, `2026-11-30T14:00`, `...+01:00`; UTC unless
    it says otherwise, as in the console), or an age (`90s`, `30m`, `6h`, `2d`) before now."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        text = str(value).strip()
        if _DURATION.match(text):
            try:
                return datetime.now(UTC) - (parse_duration(text) or timedelta())
            except (OverflowError, ValueError):
                self.fail(f"{text!r} reaches back past the year 1", param, ctx)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            self.fail(f"{text!r} is not a date or time (2026-11-30, 2026-11-30T14:00, "
                      "or an age: 30m, 6h, 2d)", param, ctx)
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@main.command()
@click.option("--provider", help=f"One provider ({', '.join(providers.names())}).")
@click.option("--source", "source", metavar="PROVIDER/SOURCE",
              help="One configured source, e.g. stripe/connect (`stripe`: its default source).")
@click.option("--type", "event_type", help="Event type, e.g. invoice.paid.")
@click.option("--status", type=click.Choice([str(s) for s in JobStatus]),
              help="The job's status.")
@click.option("--since", type=Moment(), help="Received at or after this time.")
@click.option("--until", type=Moment(), help="Received before this time.")
@click.option("--search", metavar="TEXT",
              help="An event id, or words anywhere in the payload (an email, an invoice id): "
                   "an event is searchable by its words once its job has run.")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--payload", "with_payload", is_flag=True,
              help="With --json: each event's payload too, as recorded (the lines "
                   "`webhooks check-handlers` replays).")
def events(provider: str | None, source: str | None, event_type: str | None,
           status: str | None, since: datetime | None, until: datetime | None,
           search: str | None, limit: int, as_json: bool, with_payload: bool) -> None:
    """Events newest first, with their source, job's status, attempts and last error."""
    if with_payload and not as_json:
        fail("--payload prints the payloads in the JSON lines: give --json with it", 2)
    settings = local_settings()
    from webhooks import tables
    from webhooks.shared.events import EventFilter

    name = None
    if source is not None:
        provider, name = source_of(settings, source, whole=False)
    spec = EventFilter(provider, event_type, JobStatus(status) if status else None, since,
                       until, search, source=name)
    rows, payloads, more = _database(
        lambda: _list_events(_engine(settings), spec, limit, with_payload))
    if as_json:
        for row in rows:
            click.echo(tables.event_line(row, payloads.get(row.id)))
        return
    if not rows:
        click.echo("no events match")
        return
    width = shutil.get_terminal_size().columns
    click.echo(tables.events_table(rows, datetime.now(UTC), width))
    if more:
        click.echo(f"(the newest {len(rows)}; more with --limit or narrower filters)",
                   err=True)


def _list_events(engine: Engine, spec: Any, limit: int, with_payload: bool = False,
                 ) -> tuple[list[Any], dict[int, str], bool]:
    """Up to `limit` events, a page of shared.events.list_events at a time; with_payload,
    their payloads (by row id, a query per page); and whether more match."""
    from webhooks.shared.events import list_events, payloads_of

    rows: list[Any] = []
    payloads: dict[int, str] = {}
    after = None
    # One snapshot: a payload is there for every event listed (a prune in between
    # removes neither).
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn:
        while len(rows) < limit:
            page = list_events(conn, spec, limit=limit - len(rows), after=after)
            rows += page.events
            if with_payload and page.events:
                payloads.update(payloads_of(conn, page.events))
            after = page.next
            if after is None:
                return rows, payloads, False
    return rows, payloads, True


@main.command()
@click.option("--kind", type=click.Choice([str(k) for k in NotificationKind]),
              help="One kind of notification.")
@click.option("--status", type=click.Choice([str(s) for s in NotificationStatus]),
              help="The notification's status.")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def notifications(kind: str | None, status: str | None, limit: int, as_json: bool) -> None:
    """Recorded notifications, newest first: kind, source, count, status, channels."""
    settings = local_settings()
    from webhooks import tables
    from webhooks.shared import notifications as recorded

    def listed() -> list[Any]:
        with _engine(settings).connect() as conn:
            return recorded.list_notifications(conn, limit=limit, kind=kind, status=status)

    rows = _database(listed)
    if as_json:
        for row in rows:
            click.echo(tables.notification_line(row))
        return
    click.echo(tables.notifications_table(rows) if rows else "no notifications")


@main.group(invoke_without_command=True)
@click.option("--status", type=click.Choice([str(s) for s in CallStatus]),
              help="The call's status.")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
def calls(ctx: click.Context, status: str | None, limit: int, as_json: bool) -> None:
    """The calls handlers queued to other APIs, newest first (keys printed whole);
    `webhooks calls settle KEY --sent|--resend` ends an ambiguous one."""
    if ctx.invoked_subcommand is not None:
        return
    settings = local_settings()
    from webhooks.shared import calls as queued

    rows = _database(lambda: queued.list_calls(_engine(settings), status, limit))
    if as_json:
        for row in rows:
            click.echo(json.dumps({name: str(value) if isinstance(value, datetime) else value
                                   for name, value in vars(row).items()}))
        return
    if not rows:
        click.echo("no calls match")
        return
    for row in rows:
        answer = f"HTTP {row.response_status}" if row.response_status else "no answer"
        error = f"  {visible(row.last_error)}" if row.last_error else ""
        click.echo(f"{row.status:<9} {row.key}  {row.target} {row.method} {row.path}  "
                   f"attempts {row.attempts}, {answer}{error}")


@calls.command()
@click.argument("key")
@click.option("--sent", "outcome", flag_value="sent",
              help="The target did make it (checked there): nothing more is sent.")
@click.option("--resend", "outcome", flag_value="resend",
              help="The target did not make it: make it again, under a new key (a failed "
                   "call too, once what the target refused is fixed).")
def settle(key: str, outcome: str | None) -> None:
    """End an ambiguous call (its outcome was unknown when its key's lifetime passed), or
    send a failed one again."""
    if outcome is None:
        fail("say how it ended: --sent or --resend", 2)
    settings = local_settings()
    from webhooks.shared import calls as queued

    try:
        new_key = _database(lambda: queued.settle(_engine(settings), key,
                                                   sent=outcome == "sent"))
    except queued.SettleRefused as error:
        fail(str(error))
    if new_key is None:
        click.echo(f"{key} settled as sent: nothing more is sent")
        return
    if settings.broker_url is not None:
        from webhooks.shared import wakeups

        wakeups.wake_calls(wakeups.create_broker(settings))
    click.echo(f"{key} is sent again under the key {new_key}")


@main.command()
@click.argument("provider")
@click.argument("event_id")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def show(provider: str, event_id: str, as_json: bool) -> None:
    """One event: payload, job, effects (ledger, subscription, emails), duplicates."""
    settings = local_settings()
    from webhooks import tables
    from webhooks.shared import hooks
    from webhooks.shared.events import show_event

    hooks.load(settings.handler_modules)  # the effects hooks: built-in and yours

    def read() -> Any:
        with _engine(settings).connect() as conn:
            return show_event(conn, provider, event_id)

    detail = _database(read)
    if detail is None:
        fail(f"no event {event_id} from {provider}")
    click.echo(tables.detail_json(detail) if as_json else tables.detail_text(detail))


@main.command()
@click.option("--since", type=Moment(), help="Only rows recorded at or after this time.")
@click.option("--stale", type=Duration(), default="15m", show_default=True,
              help="A job due (pending, its time come, its provider not paused) for longer "
                   "is a violation.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per violation.")
def audit(since: datetime | None, stale: timedelta, as_json: bool) -> None:
    """Check the invariants exactly-once leaves behind, read-only, in one snapshot: each
    event has its job, each done job its effects (the checks the apps register), each sent
    email its Postmark id, no job due for longer than --stale. Prints each violation on a
    line; exit 1 with violations."""
    settings = local_settings()
    from webhooks import tables
    from webhooks.shared import audit as checks
    from webhooks.shared import hooks

    hooks.load(settings.handler_modules)  # the apps' audit checks: built-in and yours
    report = _database(lambda: checks.audit(_engine(settings), since=since, stale=stale))
    for violation in report.violations:
        click.echo(tables.violation_json(violation) if as_json
                   else tables.violation_text(violation))
    if report.violations:
        sys.exit(1)


# --- the console and reconciliation ---------------------------------------------------


@main.command()
@click.option("--host", default=None,
              help="Interface to listen on (default $CONSOLE_HOST, else 127.0.0.1; "
                   "$CONSOLE_PORT is the port).")
def console(host: str | None) -> None:
    """The operator console on $CONSOLE_PORT (HTTP Basic auth: CONSOLE_USER and
    CONSOLE_PASSWORD)."""
    settings = procfile_settings()
    from webhooks.console.app import serve
    from webhooks.console.settings import ConsoleSettings

    try:
        console_settings = ConsoleSettings.from_env()
        serve(process_settings(settings), console_settings,
              host=host or console_settings.host)
    except MissingVariable as error:  # CONSOLE_PASSWORD
        fail(str(error))
    except ConfigError as error:
        fail(str(error), code=2)


@main.command()
@click.argument("target", metavar="PROVIDER[/SOURCE]")
@click.option("--since", type=Moment(), default=None,
              help="List the provider's events from this time (default: 72 hours ago).")
@click.option("--dry-run", is_flag=True, help="List what would be recorded; record nothing.")
def reconcile(target: str, since: datetime | None, dry_run: bool) -> None:
    """Record the events that were never delivered (through the provider's API), each
    exactly as a delivery would be, and wake the workers. PROVIDER/SOURCE reconciles one
    source with its credentials; PROVIDER each of its sources that has credentials."""
    settings = local_settings()
    from webhooks.shared import db, reconciliation, wakeups

    provider, name = source_of(settings, target)
    if provider not in providers.reconciled():
        fail(f"{provider!r} has no event API to reconcile from (one of "
             f"{', '.join(providers.reconciled())})", 2)
    chosen = _reconciled_sources(settings, provider, name)
    start = since or datetime.now(UTC) - reconciliation.DEFAULT_LOOKBACK
    engine = db.create_engine(settings, pool_size=1, autocommit=True)
    broker = wakeups.create_broker(settings) if settings.broker_url else None

    def wake(job_ids: list[int]) -> None:
        if broker is not None:
            wakeups.wake_jobs(broker, job_ids)

    def notify(result: reconciliation.Result) -> None:
        """Its reconcile.found, as the clock's runs record theirs."""
        recorded = _database(functools.partial(reconciliation.record_found, engine, result,
                                               settings))
        if recorded.due_now and broker is not None:
            wakeups.wake_notifications(broker)

    for source in chosen:
        api = reconciliation.api_for(settings, source)
        try:
            result = _database(functools.partial(
                reconciliation.reconcile, engine, api, source.provider, start,
                dry_run=dry_run, wake=wake, source_name=source.name))
        except reconciliation.ReconcileFailed as error:
            done = error.result  # type: ignore[attr-defined]
            notify(done)
            fail(f"{source.label}: {error} ({done.summary()}; what was recorded stays "
                 "recorded)")
        notify(result)
        for listing in result.would_record:
            click.echo(visible(f"would record {listing.event_id} {listing.event_type or ''} "
                               f"{listing.created.isoformat()}".rstrip()))
        click.echo(f"{source.label}: {result.summary()}" if len(chosen) > 1
                   else result.summary())


def _reconciled_sources(settings: Settings, provider: str, name: str | None) -> list[Any]:
    """The source named, or each of the provider's sources with credentials; exit 1 when
    the one named (or the default one, none having credentials) lacks them."""
    from webhooks.shared import reconciliation

    if name is None:
        found = [source for source in reconciliation.configured(settings)
                 if source.provider == provider]
        if found:
            return found
    source = reconciliation.registered_source(settings, provider, name)
    if source is None:
        fail(f"{provider}/{name}: no such source (see {provider.upper()}_SOURCES)")
    try:
        reconciliation.api_for(settings, source)
    except MissingVariable as error:
        fail(str(error))
    return [source]


# --- pause and resume -----------------------------------------------------------------


@main.command("check-handlers")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--provider", default="stripe", show_default=True,
              help="The provider of events that do not name theirs.")
@click.option("--schedules", "count", type=click.IntRange(1), default=50, show_default=True,
              help="Schedules to run the events under.")
@click.option("--seed", type=click.IntRange(0), help="Draw the schedules of an earlier run.")
@click.option("--ignore", multiple=True, metavar="TABLE.COLUMN",
              help="A column that differs by nature between two runs (repeatable).")
def check_handlers(files: tuple[str, ...], provider: str, count: int, seed: int | None,
                   ignore: tuple[str, ...]) -> None:
    """Prove the apps WEBHOOK_HANDLERS names exactly-once: FILES' events applied once each,
    in order, then under the schedules providers and this system produce (each event
    several times, in any order, at once from two connections, beside a reconciliation,
    after a neighbour's failure, failed and replayed); exit 1 naming the shortest schedule
    that leaves the apps' tables, emails or audit checks otherwise, or a handler that
    opens a network connection (docs/testing-your-app.md). On a database of its own:
    created on DATABASE_URL's server, else on an embedded Postgres; dropped at the end."""
    settings = load_settings()
    from webhooks import testing

    try:
        import hypothesis  # noqa: F401 - the kit draws its schedules with it
    except ImportError as error:
        fail(f"the test kit needs the `testing` extra (pip install "
             f"'webhooks-exactly-once[testing]'): {error}", 2)
    if provider not in providers.PROVIDERS:
        fail(f"unknown provider {provider!r} (one of {', '.join(providers.names())})", 2)
    try:
        events = testing.read_events(files, provider)
    except testing.UnreadableEvents as error:
        fail(str(error), 2)
    if not settings.handler_modules:
        fail("WEBHOOK_HANDLERS names no app to check", 2)
    from webhooks.migrate import MigrationError

    try:
        with testing.database(settings.database_url) as url, \
                testing.Kit(url, settings.handler_modules, ignore=ignore) as kit:
            result = testing.check(kit, events, schedules_count=count, seed=seed)
    except testing.KitError as error:
        fail(str(error), 2)
    except (WebhooksError, MigrationError) as error:  # an app that does not load or migrate
        fail(str(error))
    click.echo(result.report())
    sys.exit(0 if result.ok else 1)


@main.command()
@click.argument("target", metavar="PROVIDER[/SOURCE]")
def pause(target: str) -> None:
    """Keep acknowledging and recording the deliveries of PROVIDER (every source of it) or
    of one source, but run none of their jobs until `webhooks resume` (every worker stops
    within a second)."""
    settings = local_settings()
    from webhooks.shared import pausing

    provider, name = source_of(settings, target)
    newly = _database(lambda: pausing.pause(_engine(settings), provider, name))
    click.echo(f"{target} {'paused' if newly else 'was already paused'}: its deliveries "
               f"are recorded, its jobs wait for `webhooks resume {target}`")


@main.command()
@click.argument("target", metavar="PROVIDER[/SOURCE]")
def resume(target: str) -> None:
    """Run the jobs of PROVIDER (every source of it, each paused on its own included) or of
    one source again, oldest first. A source stays paused while its provider is."""
    settings = local_settings()
    from webhooks.shared import pausing

    provider, name = source_of(settings, target)
    due = _database(lambda: pausing.resume(_engine(settings), provider, name))
    if due is None:
        click.echo(f"{target} was not paused" + (
            f" on its own (`webhooks resume {provider}` resumes every source)" if name else ""))
        return
    _wake(settings, due=due)
    click.echo(f"{target} resumed: {due} due job(s) run, oldest first")
