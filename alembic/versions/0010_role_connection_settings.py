"""the server ends a cut-off client's sessions within seconds, through a pooler too

A host cut off from the database (packets dropped, no reset) kept its row locks and
claimed jobs until idle_in_transaction_session_timeout, or for as long as the kernel
retransmitted the results it was sent: every other worker skipped those jobs meanwhile.
The processes send keepalive and user-timeout settings as startup options
(shared.db.SERVER_SETTINGS), but a pooler in transaction mode drops startup options. These
are now also the role's defaults in this database (ALTER ROLE CURRENT_USER IN DATABASE),
which every session of the role gets, the pooler's included. No schema change.

All of them are USERSET parameters, which an ordinary role may set for itself. A role
refused anyway (a hosted server that forbids ALTER ROLE) gets a warning naming them, and
the migration goes on: they are session defaults an operator may set in postgresql.conf
instead (deploy/postgres/partitions.conf), not something the schema needs, and a refused
deploy would stop every other change with it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 10:00:00.000000
"""

import logging
from collections.abc import Sequence

from alembic import context, op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")

# shared.db.SERVER_SETTINGS as of this revision (a migration keeps its own values: a later
# change of them is a migration of its own).
SETTINGS = {
    "tcp_keepalives_idle": "5",
    "tcp_keepalives_interval": "2",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "10000",
    "idle_in_transaction_session_timeout": "20000",
    "client_connection_check_interval": "2000",
}


def _for_role(clauses: list[str]) -> str:
    """One DO block: ALTER ROLE CURRENT_USER IN DATABASE <this database> <clause> for each
    clause, the database's name quoted by quote_ident; a refusal is a WARNING. No "%" in
    it: offline (alembic upgrade --sql) the driver's escaping would double it."""
    statements = "\n".join(
        "    EXECUTE 'ALTER ROLE CURRENT_USER IN DATABASE ' || quote_ident(current_database())"
        f" || ' {clause}';" for clause in clauses)
    return f"""DO $$
BEGIN
{statements}
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING USING MESSAGE = 'webhooks: this role may not set its own defaults ('
        || SQLERRM || '): set {", ".join(SETTINGS)} in postgresql.conf'
        ' (deploy/postgres/partitions.conf)';
END $$"""


def _run(sql: str) -> None:
    """Run sql; online, the server's warnings reach the migration's log."""
    if context.is_offline_mode():
        op.execute(sql)
        return
    driver = op.get_bind().connection.driver_connection
    handler = _relay
    driver.add_notice_handler(handler)  # type: ignore[union-attr]
    try:
        op.execute(sql)
    finally:
        driver.remove_notice_handler(handler)  # type: ignore[union-attr]


def _relay(diagnostic: object) -> None:
    if getattr(diagnostic, "severity_nonlocalized", "") == "WARNING":
        log.warning("%s", getattr(diagnostic, "message_primary", ""))


def upgrade() -> None:
    _run(_for_role([f"SET {name} = {value}" for name, value in SETTINGS.items()]))


def downgrade() -> None:
    _run(_for_role([f"RESET {name}" for name in SETTINGS]))
