"""`webhooks migrate`: the core's migrations, then each named app's, each a history of its own.

Which apps: the modules WEBHOOK_HANDLERS names, in its order, then the modules of the
`webhooks.handlers` entry points (an entry point `name = pkg.app:attr` names `pkg.app`),
each once. A module that has a module-level `MIGRATIONS` has migrations; one without has
none (a module of handlers only). `webhooks dev` names the reference app, `webhooks.ledger`,
when WEBHOOK_HANDLERS is unset.

An app's migrations:

- `MIGRATIONS` is the path (a `str` or a `pathlib.Path`; a relative one is taken from the
  module's own folder) of a folder that holds only Alembic revision scripts: no env.py, no
  alembic.ini. Its first revision has `down_revision = None`; its revisions depend on
  nothing of the core's (`depends_on` stays None) and may use every core table, since they
  run after the core is at its head.
- Each history is kept in a version table of its own: the core's is `alembic_version` (as
  `alembic upgrade head` keeps it), an app's `alembic_version_` followed by its module's
  name with every run of other characters than a-z and 0-9 turned into `_`
  (`webhooks.ledger`: `alembic_version_webhooks_ledger`); a name longer than Postgres'
  63 bytes keeps its first 54 characters, then `_` and 8 hex digits of the module name's
  SHA-256. Two named apps whose names give the same table are refused.
- The project brings the environment: an app's folder is run by the core's own env.py
  (alembic/, installed as webhooks.migrations) with `version_locations` set to the folder
  alone (so none of the core's revisions are in its history) and the version table above,
  handed over in `Config.attributes` (`version_table`, `target_metadata`). Each history runs
  in its own transaction under the same advisory lock (`webhooks:migrate`), so several
  `release` processes started at once migrate one at a time.
- Safe to run again: a history at its head is not touched.
- `METADATA` (optional): the `sqlalchemy.MetaData` the app's tables are declared on. With
  it, `webhooks migrate --check` compares the app's tables with the database as well: the
  database must match the union of the core's and the named apps' MetaData (the version
  tables aside), so an app with tables but no `METADATA` shows them as unknown there.

The reference app, `webhooks.ledger`, is such an app (webhooks/ledger/migrations/). Its
tables were the core's revision 0001's before it had a history: a database migrated then
keeps them and their rows, and the app's first revision, run there, finds them
(`CREATE TABLE IF NOT EXISTS`, `CREATE INDEX IF NOT EXISTS`, the same definitions) and only
records itself in alembic_version_webhooks_ledger. Without the app named, they stay as they
are: no history drops a table it did not create.

`alembic upgrade head` and `alembic check` (alembic.ini) still work on the core alone, as CI
runs them; `webhooks migrate --check` checks every history (tests/integration/
test_app_migrations.py).

Where the tables go: where the session's `search_path` says (DATABASE_URL's
`?options=-csearch_path%3D...`, or the role's `ALTER ROLE ... SET search_path`), the core's
and the apps' tables and their version tables alike, unqualified, in its first schema
(`current_schema()`). Before each history, env.py runs `schema_for_tables` under the
migrations' lock: the search_path's first schema is created when it does not exist (a
schema named there and missing would otherwise leave the tables to the next one, or to
"no schema has been selected to create in"), and a version table found in another schema
of the search_path (an install kept elsewhere) stops the migration with one line, rather
than be taken for this one's (tests/integration/test_schemas.py).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from webhooks.shared import hooks
from webhooks.shared.models import metadata as core_metadata

CORE = "core"
CORE_VERSION_TABLE = "alembic_version"
INSTALLED = Path(__file__).resolve().parent / "migrations"  # alembic/, as installed
SOURCE = Path(__file__).resolve().parents[1] / "alembic"  # a source checkout
MAX_IDENTIFIER = 63  # Postgres' NAMEDATALEN - 1


class MigrationError(Exception):
    """A named app's MIGRATIONS cannot be run: the message names the module."""


def environment() -> Path:
    """The core's Alembic folder (env.py, script.py.mako, versions/)."""
    return INSTALLED if INSTALLED.is_dir() else SOURCE


def version_table(module: str) -> str:
    """The version table of the app `module`'s history."""
    name = "alembic_version_" + re.sub(r"[^a-z0-9]+", "_", module.lower()).strip("_")
    if len(name) > MAX_IDENTIFIER:
        digest = hashlib.sha256(module.encode()).hexdigest()[:8]
        name = f"{name[:54]}_{digest}"
    return name


@dataclass(frozen=True)
class History:
    """One migration history: the core's, or a named app's."""

    name: str  # "core", or the app's module
    folder: Path  # its revision scripts
    version_table: str
    metadata: sa.MetaData | None = None  # its tables, where declared

    def config(self, connection: Connection | None = None) -> Config:
        config = Config()
        config.set_main_option("script_location", _escaped(environment()))
        if self.name != CORE:
            config.set_main_option("path_separator", "os")
            config.set_main_option("version_locations", _escaped(self.folder))
        config.attributes.update(configure_logger=False, version_table=self.version_table,
                                 target_metadata=self.metadata)
        if connection is not None:
            config.attributes["connection"] = connection
        return config

    def heads(self) -> tuple[str, ...]:
        return tuple(sorted(ScriptDirectory.from_config(self.config()).get_heads()))

    def current(self, connection: Connection) -> tuple[str, ...]:
        """The revisions the database is at (none: never migrated), read and rolled back."""
        context = MigrationContext.configure(connection,
                                             opts={"version_table": self.version_table})
        try:
            return tuple(sorted(context.get_current_heads()))
        finally:
            connection.rollback()


def _escaped(path: Path) -> str:
    return str(path).replace("%", "%%")  # Config's values are interpolated


def app_modules(handler_modules: Sequence[str]) -> tuple[str, ...]:
    """The named apps, in order: WEBHOOK_HANDLERS, then the entry points' modules."""
    named = [*handler_modules, *(entry.module for entry in
                                 entry_points(group=hooks.ENTRY_POINTS))]
    return tuple(dict.fromkeys(named))


def histories(modules: Iterable[str]) -> list[History]:
    """The core's history, then that of each of `modules` that declares MIGRATIONS."""
    found = [History(CORE, environment() / "versions", CORE_VERSION_TABLE, core_metadata)]
    if os.getcwd() not in sys.path:  # where the settings found the modules (hooks.load)
        sys.path.append(os.getcwd())
    for name in modules:
        module = importlib.import_module(name)
        declared = getattr(module, "MIGRATIONS", None)
        if declared is None:
            continue
        if not isinstance(declared, str | os.PathLike):
            raise MigrationError(f"{name}.MIGRATIONS must be a str or a pathlib.Path, "
                                 f"not {type(declared).__name__}")
        folder = Path(declared)
        if not folder.is_absolute() and getattr(module, "__file__", None):
            folder = Path(module.__file__ or "").parent / folder
        if not folder.is_dir():
            raise MigrationError(f"{name}.MIGRATIONS: no folder {folder}")
        metadata = getattr(module, "METADATA", None)
        if metadata is not None and not isinstance(metadata, sa.MetaData):
            raise MigrationError(f"{name}.METADATA must be a sqlalchemy MetaData")
        history = History(name, folder.resolve(), version_table(name), metadata)
        clash = next((h for h in found if h.version_table == history.version_table), None)
        if clash is not None:
            raise MigrationError(f"{name} and {clash.name} would share the version table "
                                 f"{history.version_table}")
        found.append(history)
    return found


@dataclass(frozen=True)
class Applied:
    history: History
    before: tuple[str, ...]
    after: tuple[str, ...]

    def line(self) -> str:
        after = ", ".join(self.after) or "none"
        if self.before == self.after:
            return f"{self.history.name}: at {after} (nothing to apply)"
        return f"{self.history.name}: {', '.join(self.before) or 'empty'} -> {after}"


def upgrade(connection: Connection, modules: Iterable[str]) -> list[Applied]:
    """Bring each history to its head on `connection` (not in a transaction: the
    migrations manage theirs), the core's first, then each app's in the order named."""
    applied = []
    for history in histories(modules):
        before = history.current(connection)
        command.upgrade(history.config(connection), "heads")
        applied.append(Applied(history, before, history.current(connection)))
    return applied


def partition_names(connection: Connection) -> set[str]:
    """The partitions in the tables' schema (of events, jobs, search documents and dedup
    keys: shared/partitions.py creates and drops them): tables of no MetaData, compared
    through their partitioned tables."""
    return set(connection.execute(sa.text(
        "SELECT relname FROM pg_class WHERE relispartition AND relkind IN ('r', 'p') "
        "AND relnamespace = CAST(current_schema() AS regnamespace)")).scalars())


def check(connection: Connection, modules: Iterable[str]) -> list[str]:
    """What differs from the code, one line each (none: all is current): a history not at
    its head, and the database's tables against the core's and the apps' MetaData."""
    found = histories(modules)
    problems = []
    for history in found:
        current, heads = history.current(connection), history.heads()
        if current != heads:
            problems.append(f"{history.name}: at {', '.join(current) or 'none'}, "
                            f"head {', '.join(heads)} ({history.version_table})")
    version_tables = {history.version_table for history in found}

    partitions = partition_names(connection)

    def include_name(name: str | None, kind: str, parents: Any) -> bool:
        return not (kind == "table" and (name in version_tables or name in partitions))

    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "include_name": include_name})
    try:
        diff = compare_metadata(context, [h.metadata for h in found  # type: ignore[arg-type]
                                          if h.metadata is not None])
    finally:
        connection.rollback()
    problems.extend(f"the database differs from the tables declared: {_described(change)}"
                    for change in diff)
    return problems


def _described(change: Any) -> str:
    """One autogenerate difference, by name: ('remove_table', Table) -> remove_table accounts;
    a modification (a list of them) -> each, separated by '; '."""
    if isinstance(change, list):
        return "; ".join(_described(part) for part in change)
    if not isinstance(change, tuple):
        return str(change)
    words = [str(change[0])]
    for part in change[1:]:
        if isinstance(part, sa.Table):
            words.append(part.name)
        elif isinstance(part, sa.Index | sa.Constraint):
            words.append(f"{part.name or type(part).__name__} on {getattr(part, 'table', '')}")
        elif isinstance(part, sa.Column):
            words.append(part.name)
        elif part is not None and part != {}:
            words.append(str(part))
    return " ".join(words)


def first_schema(search_path: str) -> str | None:
    """The first schema a search_path names, as Postgres reads it (an unquoted name folded
    to lower case, a quoted one as written); None for `$user` (Postgres' own default, a
    schema per role, skipped when absent), `pg_...` or an empty path."""
    text = search_path.strip()
    if text.startswith('"'):
        name, rest = "", text[1:]
        while '"' in rest:
            part, _, rest = rest.partition('"')
            name += part
            if not rest.startswith('"'):
                break
            name, rest = name + '"', rest[1:]
    else:
        name = text.split(",", 1)[0].strip().lower()
    return None if not name or name == "$user" or name.startswith("pg_") else name


def schema_for_tables(connection: Connection, version_table: str) -> str:
    """The schema the migrations create their tables and `version_table` in (the module's
    docstring), the search_path's first created if missing; MigrationError (one line) when
    it cannot be, or when `version_table` is found in another schema. Runs in a
    transaction of its own, committed, under the migrations' lock."""
    own = not connection.in_transaction()
    transaction = connection.begin() if own else None
    try:
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('webhooks:migrate'))"))
        search_path = str(connection.execute(sa.text("SHOW search_path")).scalar_one())
        named = first_schema(search_path)
        if named is not None and connection.execute(sa.text(
                "SELECT NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = :name)"),
                {"name": named}).scalar_one():
            try:
                with connection.begin_nested():
                    connection.execute(sa.schema.CreateSchema(named))
            except sa.exc.DBAPIError as error:
                raise MigrationError(
                    f"search_path ({search_path}): schema {named} does not exist and could "
                    f"not be created: {str(error.orig or error).splitlines()[0]}") from error
        schema = connection.execute(sa.text("SELECT current_schema()")).scalar_one_or_none()
        if schema is None:
            raise MigrationError(f"search_path ({search_path}) names no schema that exists")
        found = connection.execute(sa.text(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.oid = to_regclass(:table)"),
            {"table": connection.dialect.identifier_preparer.quote_identifier(version_table)},
        ).scalar_one_or_none()
        if found is not None and found != schema:
            raise MigrationError(
                f"{version_table} is in schema {found}, not in {schema}, the first of the "
                f"search_path ({search_path}): its tables are another install's, or were "
                f"created before the search_path was set")
        if transaction is not None:
            transaction.commit()
        return str(schema)
    except BaseException:
        if transaction is not None and transaction.is_active:
            transaction.rollback()
        raise

