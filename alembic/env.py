"""Alembic environment: the URL comes from DATABASE_URL (through Settings; unset, it stops
with one line naming it), or from a connection handed over in config.attributes (tests,
`webhooks migrate`).

It runs the core's history (versions/, version table alembic_version, the core's MetaData)
unless config.attributes says otherwise: `webhooks migrate` (webhooks/migrate.py) runs each
named app's folder of revision scripts through it too, with `version_locations` set to that
folder and the app's own `version_table` and `target_metadata` in config.attributes.

Installed, this folder is the package webhooks.migrations, found by `webhooks migrate`."""

from __future__ import annotations

from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context

from webhooks.shared.db import database_url
from webhooks.shared.models import metadata
from webhooks.shared.settings import Settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

# The history being run: the core's by default, an app's when webhooks/migrate.py says so.
version_table = config.attributes.get("version_table", "alembic_version")
target_metadata = config.attributes.get("target_metadata", metadata)


def run_migrations_offline() -> None:
    context.configure(url=database_url(Settings.from_env()), target_metadata=target_metadata,
                      version_table=version_table, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = sa.create_engine(database_url(Settings.from_env()), poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        _run(connection)


def _run(connection: sa.Connection) -> None:
    # The search_path's first schema, created if missing: the tables and the version table
    # go there (webhooks/migrate.py "Where the tables go").
    from webhooks.migrate import partition_names, schema_for_tables

    schema_for_tables(connection, version_table)
    partitions: set[str] = set()

    def include_name(name: str | None, kind: str, parents: object) -> bool:
        # Partitions are compared through their partitioned tables (read when autogenerate
        # compares: `alembic check`, never while migrating).
        if kind == "table" and not partitions:
            partitions.update(partition_names(connection) or {""})
        return not (kind == "table" and name in partitions)

    context.configure(connection=connection, target_metadata=target_metadata,
                      version_table=version_table, compare_type=True,
                      include_name=include_name)
    with context.begin_transaction():
        # Several `release` processes may start at once: let one migrate at a time.
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('webhooks:migrate'))"))
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
