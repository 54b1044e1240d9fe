"""Engines and transactions. One place turns DATABASE_URL into a SQLAlchemy engine, and
one place translates driver errors."""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlsplit

import psycopg
import sqlalchemy as sa
from psycopg.rows import class_row
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Engine

from webhooks.shared.deadlines import DEADLINES
from webhooks.shared.errors import DatabaseUnavailable
from webhooks.shared.settings import Settings, database_hosts

T = TypeVar("T")
Row = TypeVar("Row")

# SQLSTATEs worth retrying the whole transaction for.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock
# A write refused by a server that is no longer the primary (a failover demoted it, or a
# pooler or DNS still points at it): its connections are dropped like a dead server's,
# so that the next one finds the new primary (target_session_attrs=read-write).
READ_ONLY_SQLSTATES = frozenset({"25006"})  # read_only_sql_transaction


def database_url(settings: Settings) -> str:
    """The SQLAlchemy URL of DATABASE_URL; MissingVariable if it is unset (no process
    of the core ever falls back to an embedded server)."""
    settings.require_servers(broker=False)
    assert settings.database_url is not None
    return sqlalchemy_url(settings.database_url)


def sqlalchemy_url(raw: str) -> str:
    """DATABASE_URL as SQLAlchemy reads it. Several hosts as libpq writes them
    (`postgresql://u:p@db1:5432,db2:5432/app?target_session_attrs=read-write`) become
    `host=` parameters, which psycopg hands back to libpq as its host list: every new
    connection goes to whichever host target_session_attrs accepts (the primary)."""
    written, login, hosts, tail = database_hosts(raw)
    scheme = "postgresql+psycopg" if written in ("postgres", "postgresql") else written
    if len(hosts) < 2:
        return scheme + raw[len(written):]
    path, _, query = tail.partition("?")
    listed = "&".join(f"host={quote(host, safe=':[]')}" for host in hosts if host)
    return f"{scheme}://{login}/{path}?{listed}" + (f"&{query}" if query else "")


# A host cut off from the database (packets dropped, no reset: a partition, a dead NIC, a
# frozen VM) must not hold its row locks and claimed jobs for long: SPEC.md "Partitions"
# and guarantee 9 give it 30 s. TCP says nothing on its own: an idle connection stays
# "established" forever and unacknowledged data is retransmitted for about 15 minutes.
# Both ends probe instead. Keepalives: after KEEPALIVE_IDLE seconds of silence a probe,
# then one every KEEPALIVE_INTERVAL seconds; TCP_USER_TIMEOUT: data or probes left
# unacknowledged this long end the connection. Linux lets the user timeout decide once it
# is set, so either way a dead peer is noticed within about USER_TIMEOUT_MS plus one probe
# interval, whether the session was idle, running a statement (client_connection_check_
# interval polls the socket) or sending results. Acknowledgements come from the peer's
# kernel, not the application: a slow handler or a busy server never trips them.
KEEPALIVE_IDLE = 5  # seconds
KEEPALIVE_INTERVAL = 2  # seconds
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = 10_000
# What the server applies to our sessions. Sent as startup options on every direct
# connection, and also set for the role in the database by migration 0010 (a pooler in
# transaction mode drops startup options): keep the two in step
# (tests/integration/test_db.py checks them). idle_in_transaction_session_timeout ends a
# transaction left idle by a hung process (keepalives are answered by its kernel, so only
# this notices it): a worker's transaction is its claim and its handlers' statements back
# to back, closed within worker.jobs.BATCH_SECONDS plus one handler, far below it; it stays
# under the 30 s a partition may cost others. client_connection_check_interval: a worker
# killed with -9 mid-statement is noticed within 2 s even during a long statement.
SERVER_SETTINGS = {
    "tcp_keepalives_idle": str(KEEPALIVE_IDLE),
    "tcp_keepalives_interval": str(KEEPALIVE_INTERVAL),
    "tcp_keepalives_count": str(KEEPALIVE_COUNT),
    "tcp_user_timeout": str(USER_TIMEOUT_MS),
    "idle_in_transaction_session_timeout": "20000",
    "client_connection_check_interval": "2000",
}


APPLICATION_NAME = "webhooks"  # pg_stat_activity's name for our sessions
# The acknowledgement's statement (fetch_one) is cancelled past this: its answer, 503 then,
# stays within the 10 s a provider's delivery may wait even when a synchronous standby
# stops answering (shared/deadlines.py), with room for a connection and a cancel.
ACKNOWLEDGE_DEADLINE_SECONDS = 5.0


def create_engine(
    settings: Settings, *, pool_size: int = 5, url: str | None = None, autocommit: bool = False,
    local_commits: bool = False,
) -> Engine:
    """An engine with our connection settings. autocommit: every statement is its own
    transaction, committed before execute returns (the ingest's engine, for fetch_one).

    local_commits: commits do not wait for a synchronous standby (synchronous_commit =
    local), for the worker and the clock. What they write is derived again from the
    events and jobs the ingest committed on the standby too: a failover that loses a
    worker's commit loses a job's "done" with its effects, and the job runs again on the
    new primary; a lost "sent" mark is searched for at Postmark before the email is sent
    again (worker/outbox.py). The ingest, the console and the commands keep the server's
    setting: an acknowledgement, a pause or a replay is not derived from anything."""
    # With autocommit no transaction outlives a statement: nothing to roll back when a
    # connection returns to the pool.
    options: dict[str, Any] = ({"isolation_level": "AUTOCOMMIT", "pool_reset_on_return": None}
                               if autocommit else {})
    engine = sa.create_engine(
        url or database_url(settings),
        **options,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_timeout=5,
        pool_recycle=1800,
        # Errors name the statement, never its values: those are customer ids and emails,
        # and errors reach the logs at WARNING and ERROR.
        hide_parameters=True,
        connect_args=connect_args(settings, local_commits=local_commits, url=url),
    )
    sa.event.listen(engine, "handle_error", _read_only_is_a_disconnect)
    sa.event.listen(engine, "connect", _hear_unreplicated_commits)
    LOST_SERVERS.watch(engine)
    return engine


def connect_args(settings: Settings, *, local_commits: bool = False,
                 url: str | None = None) -> dict[str, Any]:
    """libpq's connection parameters: this end's keepalives and user timeout (a process
    cut off from the database gets an error, drops the connection and finds the server
    again once it can, without a restart), and SERVER_SETTINGS as startup options, after
    the options DATABASE_URL gives (`?options=-csearch_path%3Dwebhooks`, url_options):
    both are sent, and where both set one name, SERVER_SETTINGS' value (the later) holds.
    (`options` here replaces the URL's in what psycopg sends: without the URL's first, a
    search_path in DATABASE_URL was honoured by `migrate` and lost by every process.)

    Behind a pooler in transaction mode (DATABASE_POOLER=transaction) each transaction may
    run on another of the pooler's server sessions, so nothing may live in a session:
    no startup options (PgBouncer refuses them; the role's settings of migration 0010 give
    every session the same values), and no server-side prepared statements, which psycopg
    makes of a statement run prepare_threshold times on one connection (the next
    transaction's session would not know them). There, local_commits is not applied
    either (it is a startup option): commits wait for a synchronous standby, which is
    slower, never less safe. The URL's own options are left in the URL there: PgBouncer
    refuses the connection, which the processes say at start (webhooks/cli.py
    `process_settings`, shared/pooler.py `url_options_refused`)."""
    args: dict[str, Any] = {
        "connect_timeout": 3,
        "application_name": APPLICATION_NAME,
        "keepalives": 1,
        "keepalives_idle": KEEPALIVE_IDLE,
        "keepalives_interval": KEEPALIVE_INTERVAL,
        "keepalives_count": KEEPALIVE_COUNT,
        "tcp_user_timeout": USER_TIMEOUT_MS,
    }
    if settings.transaction_pooler:
        return {**args, "prepare_threshold": None}
    own = startup_options(local_commits=local_commits)
    given = url_options(url if url is not None else settings.database_url or "")
    return {**args, "options": f"{given} {own}" if given else own}


def url_options(url: str) -> str:
    """libpq's `options` in a database URL's query (each, if given more than once), as
    libpq reads them: `?options=-csearch_path%3Dwebhooks` is `-csearch_path=webhooks`;
    "" when there are none."""
    return " ".join(value.strip() for name, value in parse_qsl(urlsplit(url).query)
                    if name == "options" and value.strip())


def startup_options(*, local_commits: bool = False) -> str:
    """SERVER_SETTINGS as libpq's `options` (-c name=value ...); local_commits: and
    synchronous_commit = local (create_engine says why)."""
    settings = {**SERVER_SETTINGS, **({"synchronous_commit": "local"} if local_commits else {})}
    return " ".join(f"-c {name}={value}" for name, value in settings.items())


# A commit whose wait for the synchronous standby was cancelled (by a client-side
# deadline, pg_cancel_backend, or a server shutting down) is reported as committed, with
# a WARNING only: "canceling wait for synchronous replication ..." (the server's own
# English text; lc_messages set to another language changes it, but our own deadline's
# cancel is caught without it). The commit is then local to the primary and a failover
# may lose it.
UNREPLICATED = "webhooks.unreplicated_commit"


def _hear_unreplicated_commits(dbapi_connection: Any, record: Any) -> None:
    info = record.info

    def heard(diagnostic: psycopg.errors.Diagnostic) -> None:
        if (diagnostic.severity_nonlocalized == "WARNING"
                and "synchronous replication" in (diagnostic.message_primary or "")):
            info[UNREPLICATED] = diagnostic.message_primary

    dbapi_connection.add_notice_handler(heard)


def _read_only_is_a_disconnect(context: sa.engine.ExceptionContext) -> None:
    """A read-only server's refusal invalidates the connection (and, as for a dead server,
    the rest of the pool), instead of leaving it pooled to be refused again."""
    if getattr(context.original_exception, "sqlstate", None) in READ_ONLY_SQLSTATES:
        context.is_disconnect = True


class LostServers:
    """A server that dropped one connection (it died, was demoted, or a failover moved the
    primary) took the pool's other connections with it. SQLAlchemy replaces a whole pool's
    older connections when a statement it runs finds its connection gone; fetch_one and
    the *_in functions run theirs through psycopg, so they say it here (lost), and each
    connection made before that moment is replaced at its next checkout, before a
    statement fails on it. Without this, every pooled connection of a worker fails one
    wake-up after a failover."""

    CONNECTED_AT = "webhooks.connected_at"  # the pool entry's info: time.monotonic()

    class _Engine:
        lost_at = 0.0

    def __init__(self) -> None:
        self._engines: weakref.WeakKeyDictionary[Engine, LostServers._Engine] = (
            weakref.WeakKeyDictionary())

    def watch(self, engine: Engine) -> None:
        state = self._engines[engine] = LostServers._Engine()
        connected_at = self.CONNECTED_AT

        def connected(dbapi_connection: Any, record: Any) -> None:
            record.info[connected_at] = time.monotonic()

        def checked_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:
            if record.info.get(connected_at, 0.0) <= state.lost_at:
                # The pool closes this connection and hands out a new one (the documented
                # "pessimistic" checkout); the new one passes.
                raise sa.exc.DisconnectionError("made before its server was lost")

        sa.event.listen(engine, "connect", connected)
        sa.event.listen(engine, "checkout", checked_out)

    def lost(self, engine: Engine) -> None:
        state = self._engines.get(engine)
        if state is not None:
            state.lost_at = time.monotonic()


LOST_SERVERS = LostServers()


@functools.lru_cache(maxsize=256)
def driver_sql(statement: sa.TextClause) -> str:
    """A text() statement in the driver's own parameter style (%(name)s)."""
    return str(statement.compile(dialect=postgresql.psycopg.dialect()))  # type: ignore[no-untyped-call]


# fetch_one, fetch_in, fetch_all_in and execute_in run a statement straight through
# psycopg, for a fraction of the CPU of Connection.execute (benchmarks/results/README.md).
# The ingest's and the worker's hot paths use them.


def fetch_one(engine: Engine, statement: sa.TextClause,
              params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Run one statement on a pooled connection of an autocommit engine and return its
    first row: one statement, one transaction, committed when this returns.

    Errors come out as SQLAlchemy's would: a DBAPIError subclass, a connection the server
    dropped invalidated (connection_invalidated), and "no database" as DatabaseUnavailable.
    So does a commit the synchronous standby may not have (its wait cancelled): the row
    is on the primary only, and an acknowledgement must not stand on it. The statement is
    cancelled past ACKNOWLEDGE_DEADLINE_SECONDS: that is DatabaseUnavailable too.
    """
    try:
        connection = engine.raw_connection()
    except sa.exc.SQLAlchemyError as error:
        _translate(error)
        raise
    except psycopg.Error as error:
        # The pool's connect raises the driver's own error (SQLAlchemy wraps only the
        # engine's very first connect): no connection is "no database", every time.
        raise DatabaseUnavailable(str(error).splitlines()[0]) from error
    try:
        driver = connection.driver_connection
        if not driver.autocommit:  # type: ignore[union-attr]
            raise RuntimeError("fetch_one needs an engine created with autocommit=True")
        connection.info.pop(UNREPLICATED, None)
        token = DEADLINES.arm(driver, ACKNOWLEDGE_DEADLINE_SECONDS)
        try:
            row = _run(engine, connection, statement, params, connection.invalidate,
                       _first_row)
        except BaseException as error:
            if DEADLINES.disarm(token) and isinstance(error, sa.exc.DBAPIError):
                raise DatabaseUnavailable(DEADLINE_PASSED) from error
            raise
        if DEADLINES.disarm(token):
            raise DatabaseUnavailable(DEADLINE_PASSED)
        if UNREPLICATED in connection.info:
            raise DatabaseUnavailable(f"a commit the synchronous standby may not have: "
                                      f"{connection.info[UNREPLICATED]}")
        return row
    finally:
        connection.close()  # back to the pool


DEADLINE_PASSED = (f"no answer within {ACKNOWLEDGE_DEADLINE_SECONDS:g} s: cancelled (a commit"
                   " waiting for a synchronous standby stays on the primary only)")


def fetch_in(conn: Connection, statement: sa.TextClause,
             params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Run a statement in conn's transaction and return its first row (errors as
    fetch_one's)."""
    return _run(conn.engine, conn.connection, statement, params, conn.invalidate, _first_row)


def fetch_all_in(conn: Connection, statement: sa.TextClause, params: dict[str, Any],
                 row_type: type[Row]) -> list[Row]:
    """Run a statement in conn's transaction and return all its rows, each built as
    row_type(**columns) (a NamedTuple or dataclass beside the statement)."""
    return _run(conn.engine, conn.connection, statement, params, conn.invalidate,
                _all_rows, class_row(row_type))


def fetch_scalars_in(conn: Connection, statement: sa.TextClause,
                     params: dict[str, Any]) -> list[Any]:
    """Run a statement in conn's transaction and return the first column of each row."""
    return _run(conn.engine, conn.connection, statement, params, conn.invalidate,
                _first_column)


def execute_in(conn: Connection, statement: sa.TextClause, params: dict[str, Any]) -> int:
    """Run a statement in conn's transaction and return its row count."""
    return _run(conn.engine, conn.connection, statement, params, conn.invalidate, _row_count)


def _first_row(cursor: Any) -> tuple[Any, ...] | None:
    return cursor.fetchone() if cursor.description else None  # type: ignore[no-any-return]


def _all_rows(cursor: Any) -> list[Any]:
    return cursor.fetchall() if cursor.description else []  # type: ignore[no-any-return]


def _first_column(cursor: Any) -> list[Any]:
    return [row[0] for row in cursor.fetchall()] if cursor.description else []


def _row_count(cursor: Any) -> int:
    return int(cursor.rowcount)


def _run(engine: Engine, connection: Any, statement: sa.TextClause,
         params: dict[str, Any], invalidate: Callable[[BaseException], None],
         result: Callable[[Any], T], row_factory: Any = None) -> T:
    sql = driver_sql(statement)
    try:
        cursor = connection.cursor(row_factory=row_factory) if row_factory else connection.cursor()
        try:
            cursor.execute(sql, params)
            return result(cursor)
        finally:
            cursor.close()
    except psycopg.Error as error:
        gone = (engine.dialect.is_disconnect(error, connection.dbapi_connection, None)  # type: ignore[arg-type]
                or error.sqlstate in READ_ONLY_SQLSTATES)
        if gone:
            invalidate(error)
            LOST_SERVERS.lost(engine)
        wrapped = sa.exc.DBAPIError.instance(sql, params, error, psycopg.Error,
                                             hide_parameters=True, connection_invalidated=gone)
        _translate(wrapped)
        raise wrapped from error


def sqlstate(error: BaseException) -> str | None:
    orig = getattr(error, "orig", None)
    return getattr(orig, "sqlstate", None)


def is_retryable(error: BaseException) -> bool:
    return sqlstate(error) in RETRYABLE_SQLSTATES


def is_unavailable(error: BaseException) -> bool:
    """True when the error means the database could not be reached or went away."""
    if isinstance(error, sa.exc.DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, sa.exc.TimeoutError):  # pool exhausted
        return True
    state = sqlstate(error)
    if state is not None:
        # 08: connection exception, 57P: operator intervention (shutdown), 53: resources,
        # 25006: a server no longer the primary
        return state.startswith(("08", "57P", "53")) or state in READ_ONLY_SQLSTATES
    return isinstance(error, sa.exc.OperationalError | sa.exc.InterfaceError)


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction; driver errors that mean "no database" become DatabaseUnavailable."""
    try:
        with engine.begin() as conn:
            yield conn
    except sa.exc.SQLAlchemyError as error:
        _translate(error)
        raise


def _translate(error: sa.exc.SQLAlchemyError) -> None:
    if is_unavailable(error):
        raise DatabaseUnavailable(str(error).splitlines()[0]) from error
