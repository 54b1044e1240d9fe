"""Emptying the tables between tests while the system's processes may still run."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine

ATTEMPTS = 3


def truncate(engine: Engine, tables: Sequence[str]) -> None:
    """TRUNCATE the tables (identities restarted), again if Postgres ends it as a deadlock's
    victim: TRUNCATE locks its tables one after another, and a running process (a worker
    claiming, the clock sweeping) can hold one of them and wait for the next. A connection
    left open by a test would block it forever: it waits 20 s at most, then fails loudly."""
    for attempt in range(ATTEMPTS):
        try:
            with engine.begin() as conn:
                conn.execute(sa.text("SET LOCAL lock_timeout = '20s'"))
                conn.execute(sa.text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
            return
        except sa.exc.OperationalError as error:
            if "deadlock detected" not in str(error) or attempt == ATTEMPTS - 1:
                raise
