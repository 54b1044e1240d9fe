"""Pause and resume a provider or one of its sources (`webhooks pause`, `webhooks resume`,
the console).

While a source is paused, `web` acknowledges and records its deliveries as usual, but no
worker claims its jobs: the claim itself skips them (queries.DUE), so nothing is claimed
and released, no attempt is spent, and neither the sweeper nor a wake-up counts them as
due. The state is a row in the database: every worker's next claim sees it, and it
survives restarts. Pausing a provider (source None) is one row for all its sources
(models.ALL_SOURCES), those configured later included; pausing one source is a row of its
own, and the provider's other sources run on. On resume the row goes (resuming a provider
takes its sources' rows with it), and the jobs run oldest first (the claim's order); the
caller wakes the workers for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.engine import Connection, Engine

from shared import queries
from shared.models import ALL_SOURCES


@dataclass(frozen=True)
class Pause:
    provider: str
    source: str | None  # None: every source of the provider
    since: datetime

    @property
    def label(self) -> str:
        """How commands name it: `stripe`, or a source's label (`stripe/connect`, and
        `stripe/stripe` for the default source paused on its own)."""
        return self.provider if self.source is None else f"{self.provider}/{self.source}"

    def covers(self, provider: str, source: str) -> bool:
        return self.provider == provider and self.source in (None, source)


def _key(provider: str, source: str | None) -> dict[str, str]:
    return {"provider": provider, "source": ALL_SOURCES if source is None else source}


def pause(engine: Engine, provider: str, source: str | None = None) -> bool:
    """Pause provider (source None) or one of its sources; False if it was paused already."""
    with engine.begin() as conn:
        return conn.execute(queries.ProviderPause, _key(provider, source)).first() is not None


def resume(engine: Engine, provider: str, source: str | None = None) -> int | None:
    """Resume provider (every source) or one source; how many of its jobs are due now, or
    None if it was not paused."""
    with engine.begin() as conn:
        if conn.execute(queries.ProviderResume, _key(provider, source)).first() is None:
            return None
        return int(conn.execute(queries.JobCountDueOf, _key(provider, source)).scalar_one())


def paused(conn: Connection) -> list[Pause]:
    """Every pause, by provider then source."""
    return [Pause(row.provider, None if row.source == ALL_SOURCES else row.source,
                  row.paused_at) for row in conn.execute(queries.ProviderListPaused)]


def is_paused(pauses: list[Pause], provider: str, source: str) -> bool:
    return any(p.covers(provider, source) for p in pauses)
