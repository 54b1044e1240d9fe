"""Pause and resume a provider (`webhooks pause`, `webhooks resume`, the console).

While a provider is paused, `web` acknowledges and records its deliveries as usual, but
no worker claims its jobs: the claim itself skips them (queries.DUE), so nothing is
claimed and released, no attempt is spent, and neither the sweeper nor a wake-up counts
them as due. The state is a row in the database: every worker's next claim sees it, and
it survives restarts. On resume the row goes, and the jobs run oldest first (the claim's
order); the caller wakes the workers for them.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.engine import Connection, Engine

from shared import queries


def pause(engine: Engine, provider: str) -> bool:
    """Pause provider; False if it was paused already."""
    with engine.begin() as conn:
        return conn.execute(queries.ProviderPause, {"provider": provider}).first() is not None


def resume(engine: Engine, provider: str) -> int | None:
    """Resume provider; how many of its jobs are due now, or None if it was not paused."""
    with engine.begin() as conn:
        if conn.execute(queries.ProviderResume, {"provider": provider}).first() is None:
            return None
        return int(conn.execute(queries.JobCountDueOf, {"provider": provider}).scalar_one())


def paused(conn: Connection) -> dict[str, datetime]:
    """The paused providers and since when."""
    return {row.provider: row.paused_at for row in conn.execute(queries.ProviderListPaused)}
