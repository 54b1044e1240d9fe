"""The start-up check of the path to the database: a pooler in transaction mode that
DATABASE_POOLER does not name.

Through a pooler in transaction mode (PgBouncer's `pool_mode = transaction`, Supavisor's
and Heroku's transaction poolers) a client connection holds a server session only for the
length of a transaction: its next one may run in any session of the pool. Unnamed, the
processes would send startup options, which PgBouncer refuses (every connection fails),
or which a pooler that ignores them drops, and psycopg would prepare statements in a
session that the next transaction does not run in. With DATABASE_POOLER=transaction,
shared.db.connect_args sends neither (docs/several-hosts.md).

The long-running processes run `warn_if_unnamed` once at start (webhooks/cli.py
`process_settings`): one WARNING line, never a refusal to start. And, named, the pooler
cannot carry DATABASE_URL's own startup options (`?options=-csearch_path%3D...`): PgBouncer
refuses every connection that sends them, a pooler told to ignore them drops them (the
tables would be looked for in another schema). `url_options_refused` is the one line they
stop at instead; the role's settings are what reaches every session the pooler opens
(docs/several-hosts.md "Where the tables live").
"""

from __future__ import annotations

import logging

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from webhooks.shared import db
from webhooks.shared.settings import Settings

log = logging.getLogger(__name__)

# PgBouncer's answer to a startup parameter it does not know (libpq's `options`).
REFUSED_STARTUP_PARAMETER = "unsupported startup parameter"
BackendPid = sa.text("SELECT pg_backend_pid()")


def warn_if_unnamed(settings: Settings) -> None:
    """One WARNING line when the database answers through a pooler in transaction mode
    and DATABASE_POOLER does not say so. Best effort: a database that cannot be reached
    is the processes' own concern (503s, retries), never a reason not to start."""
    if settings.transaction_pooler:
        return
    seen = unnamed_pooler(settings)
    if seen is not None:
        log.warning("the database answers through %s: set DATABASE_POOLER=transaction "
                    "(docs/several-hosts.md)", seen)


def url_options_refused(settings: Settings) -> str | None:
    """With DATABASE_POOLER=transaction, the line that refuses DATABASE_URL's startup
    options (and tells where they go instead); None when it has none or no pooler is
    named."""
    given = db.url_options(settings.database_url or "")
    if not settings.transaction_pooler or not given:
        return None
    return (f"DATABASE_URL: its options ({given}) are startup options, which a pooler in "
            f"transaction mode (DATABASE_POOLER=transaction) refuses (PgBouncer) or drops: "
            f"set them on the database role instead (ALTER ROLE ... IN DATABASE ... SET "
            f"search_path = ...; docs/several-hosts.md)")


def unnamed_pooler(settings: Settings) -> str | None:
    """The pooler on the way to DATABASE_URL and what shows it, connecting as the
    processes do; None when nothing does, or when the database does not answer. PgBouncer
    refuses startup options in any pool mode; DATABASE_POOLER=transaction is right in its
    session mode too, where it only leaves out what a session would have kept."""
    engine = db.create_engine(settings, pool_size=2, autocommit=True)
    try:
        return sessions_change(engine)
    except (sa.exc.SQLAlchemyError, psycopg.Error) as error:
        if REFUSED_STARTUP_PARAMETER in str(error):
            return "a pooler that refuses startup options (PgBouncer does)"
        return None
    finally:
        engine.dispose()


def sessions_change(engine: Engine) -> str | None:
    """The pooler in transaction mode that one client connection's transactions show, by
    running in different server sessions; None when they do not.

    Two connections, three transactions (the engine is autocommit: each statement is
    one). Directly, or through a pooler in session mode, a connection keeps its session:
    the first connection's two transactions name one backend, the second connection
    another. Through a pooler in transaction mode the first connection's session goes back
    to the pool at its commit: the second connection gets it (PgBouncer hands out the
    session used last), and the first connection's next transaction gets whichever is
    free; either shows."""
    with engine.connect() as one, engine.connect() as two:
        first = _backend(one)
        other = _backend(two)
        again = _backend(one)
    if other == first:
        return (f"a pooler in transaction mode (two client connections ran in one server "
                f"session, backend {first})")
    if again != first:
        return (f"a pooler in transaction mode (two transactions of one client connection "
                f"ran in different server sessions, backends {first} and {again})")
    return None


def _backend(conn: Connection) -> int:
    return int(conn.execute(BackendPid).scalar_one())
