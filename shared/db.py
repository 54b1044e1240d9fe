"""Engines and transactions. One place turns DATABASE_URL (or the embedded Postgres)
into a SQLAlchemy engine, and one place translates driver errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from shared.errors import DatabaseUnavailable
from shared.settings import Settings

# SQLSTATEs worth retrying the whole transaction for.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock


def database_url(settings: Settings) -> str:
    """The SQLAlchemy URL for settings, starting the embedded Postgres if none is set."""
    raw = settings.database_url
    if raw is None:
        from shared import embedded

        raw = embedded.postgres_url(settings.data_dir)
    return sqlalchemy_url(raw)


def sqlalchemy_url(raw: str) -> str:
    scheme, _, rest = raw.partition("://")
    if scheme in ("postgres", "postgresql"):
        scheme = "postgresql+psycopg"
    return f"{scheme}://{rest}"


def create_engine(settings: Settings, *, pool_size: int = 5, url: str | None = None) -> Engine:
    return sa.create_engine(
        url or database_url(settings),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_timeout=5,
        pool_recycle=1800,
        connect_args={
            "connect_timeout": 3,
            "application_name": "webhooks",
            # A worker killed with -9 mid-statement: Postgres notices the dead client within
            # 2 s even during a long statement, aborts its transaction and frees its locks.
            # A transaction left idle by a hung process is ended after 5 minutes.
            "options": "-c client_connection_check_interval=2000"
            " -c idle_in_transaction_session_timeout=300000",
        },
    )


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
        # 08: connection exception, 57P: operator intervention (shutdown), 53: resources
        return state.startswith(("08", "57P", "53"))
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


@contextmanager
def autocommit(engine: Engine) -> Iterator[Connection]:
    """A connection on which each statement is its own transaction: execute() returns only
    after the server committed it, without the BEGIN and COMMIT round trips. For single
    statements that must commit as a whole (the ingest's event + job)."""
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            yield conn
    except sa.exc.SQLAlchemyError as error:
        _translate(error)
        raise


def _translate(error: sa.exc.SQLAlchemyError) -> None:
    if is_unavailable(error):
        raise DatabaseUnavailable(str(error).splitlines()[0]) from error
