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

A paused backlog costs the claims nothing: its jobs are *held* (`jobs.held`), out of the
range of the pending index that the claims read. Two mechanisms, with different jobs:

- the guarantee is DUE's anti-join on paused_providers, in force from the pause's commit,
  on every worker's next claim: a paused source's job is never claimed, held or not;
- the fast path is `held`: set for the pause's pending jobs right after the pause commits
  (in batches, each its own short transaction), at recording for a source paused at that
  moment (queries.EventJobInsert, a probe of paused_providers), at a retry or a replay;
  cleared by resume, oldest first, in batches.

A recording that commits as a pause or a resume does can be missed by both: a job recorded
unheld while its source is paused (kept unclaimed by the anti-join meanwhile), or held
while its source is not. The clock's sweeper repairs both each sweep (`heal`), so that no
job stays held while its source is not paused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.engine import Connection, Engine

from webhooks.shared import queries
from webhooks.shared.models import ALL_SOURCES


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


BATCH = 5_000  # jobs held or released per transaction
HEAL_BATCH = 10_000  # jobs held and released per sweep, each way


def pause(engine: Engine, provider: str, source: str | None = None) -> bool:
    """Pause provider (source None) or one of its sources; False if it was paused already.
    In force at the first commit; then its pending jobs are held."""
    key = _key(provider, source)
    with engine.begin() as conn:
        newly = conn.execute(queries.ProviderPause, key).first() is not None
    _hold(engine, key)
    return newly


def _hold(engine: Engine, key: dict[str, str]) -> None:
    """Hold the pause's pending jobs, a batch per transaction, while the pause stands."""
    while True:
        with engine.begin() as conn:
            if conn.execute(queries.ProviderLockPause, key).first() is None:
                return  # resumed meanwhile: its resume releases what was held
            held = conn.execute(queries.JobHoldPause, {**key, "limit": BATCH}).rowcount
        if held < BATCH:
            return


def resume(engine: Engine, provider: str, source: str | None = None) -> int | None:
    """Resume provider (every source) or one source; how many of its jobs are due now, or
    None if it was not paused."""
    key = _key(provider, source)
    with engine.begin() as conn:
        if conn.execute(queries.ProviderResume, key).first() is None:
            return None
    while True:
        with engine.begin() as conn:
            released = conn.execute(queries.JobReleaseResumed, {**key, "limit": BATCH}).rowcount
        if released < BATCH:
            break
    with engine.connect() as conn:
        return int(conn.execute(queries.JobCountDueOf, key).scalar_one())


def heal(conn: Connection, limit: int = HEAL_BATCH) -> tuple[int, int]:
    """The sweeper's repair (see the module's docstring): hold the pending jobs of paused
    sources that are not held, release the held jobs of sources not paused. How many
    jobs each."""
    held = conn.execute(queries.JobHoldPaused, {"limit": limit}).rowcount
    released = conn.execute(queries.JobReleaseUnpaused, {"limit": limit}).rowcount
    return held, released


def paused(conn: Connection) -> list[Pause]:
    """Every pause, by provider then source."""
    return [Pause(row.provider, None if row.source == ALL_SOURCES else row.source,
                  row.paused_at) for row in conn.execute(queries.ProviderListPaused)]


def is_paused(pauses: list[Pause], provider: str, source: str) -> bool:
    return any(p.covers(provider, source) for p in pauses)
