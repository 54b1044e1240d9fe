"""A primary and a streaming standby of PostgreSQL, for the failover tests.

    with ReplicatedPostgres(synchronous=False) as pair:   # both servers created
        pair.url                # DATABASE_URL naming both hosts, target_session_attrs=read-write
        pair.primary_url        # the primary alone (the database `webhooks`)
        pair.wait_replayed()    # the standby has replayed everything the primary wrote
        pair.detach_standby()   # the standby receives no more WAL (replay paused too)
        pair.freeze_standby()   # SIGSTOP: a standby that stops answering (thaw_standby)
        pair.kill_primary()     # SIGKILL of the postmaster and its children
        pair.promote()          # the standby becomes the primary, on a new timeline
        pair.standby_url        # the standby (after promote: the new primary) alone

or, with the Procfile's processes on it (harness.System creates the primary):

    pair = ReplicatedPostgres(synchronous=True)
    system = System(workdir, postgres=pair.primary, DATABASE_URL=pair.url)
    try:
        system.start()
        pair.start_standby()
        ...
    finally:
        system.stop()
        pair.destroy()

The primary is a harness.PrivatePostgres (initdb, run as a non-root OS user when the test
runs as root); the standby is a copy made from it by `pg_basebackup -R` (its
standby.signal and primary_conninfo written for it) with a physical replication slot, so
the primary keeps the WAL the standby has not received. Its application_name is
STANDBY_NAME (`cluster_name`). synchronous=True names it in the primary's
synchronous_standby_names once it streams (ALTER SYSTEM), so from then on a commit returns
once the standby has flushed it; synchronous=False leaves that empty: a commit returns on
the primary alone. The promoted standby has no synchronous standby of its own.

Everything goes at the block's end, pass or fail: both servers are stopped (or killed) and
their folders removed.

Why detach_standby and not replay pause alone: a paused standby still receives the WAL,
and promotion replays everything received before it ends recovery, so pausing replay
loses nothing. To make the primary's acknowledged commits certainly absent from the
standby, it must stop receiving them: detach_standby empties the standby's
primary_conninfo (its walreceiver stops and does not start again) and pauses replay.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tests.acceptance.harness import PrivatePostgres, wait_for

STANDBY_NAME = "standby"
SLOT = "standby_slot"


class Standby(PrivatePostgres):
    """A PrivatePostgres whose data folder is a base backup of `primary`."""

    def __init__(self, primary: PrivatePostgres) -> None:
        super().__init__(settings={"cluster_name": STANDBY_NAME, "hot_standby": "on"})
        self.primary = primary

    def create(self) -> None:
        self._run("pg_basebackup", "-D", str(self.data), "-h", "127.0.0.1",
                  "-p", str(self.primary.port), "-U", "postgres", "-R", "-X", "stream",
                  "-C", "-S", SLOT, "--no-sync", "--checkpoint=fast")
        self.start()


class ReplicatedPostgres:
    """A primary and its streaming standby (see the module's docstring)."""

    def __init__(self, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        self.primary = PrivatePostgres(settings={
            "wal_level": "replica", "max_wal_senders": "5", "max_replication_slots": "5"})
        self.standby = Standby(self.primary)

    def __enter__(self) -> ReplicatedPostgres:
        try:
            self.primary.create()
            self.start_standby()
        except BaseException:
            self.destroy()
            raise
        return self

    def start_standby(self) -> None:
        """Make the standby from the running primary (created here, or by a
        harness.System given it as its postgres) and wait until it streams."""
        self.standby.create()
        if self.synchronous:
            # Only now: before the standby streams, every commit would wait for it. Set
            # after the base backup, so the standby (once promoted) waits for nobody.
            _query(self.primary.url, "ALTER SYSTEM SET synchronous_standby_names = "
                   f"'{STANDBY_NAME}'", autocommit=True)
            _query(self.primary.url, "SELECT pg_reload_conf()")
        wait_for(self.streaming, 60, "the standby streaming from the primary")

    def __exit__(self, *_: object) -> None:
        self.destroy()

    # --- addresses ---

    @property
    def primary_url(self) -> str:
        return self.primary.url

    @property
    def standby_url(self) -> str:
        return self.standby.url

    @property
    def url(self) -> str:
        """Both hosts, as libpq writes them: new connections go to the read-write one."""
        return (f"postgresql://postgres@127.0.0.1:{self.primary.port},"
                f"127.0.0.1:{self.standby.port}/webhooks?target_session_attrs=read-write")

    # --- state ---

    def streaming(self) -> bool:
        """The standby is connected to the primary and streaming (synchronous when asked)."""
        row = _query(self.primary.url, "SELECT state, sync_state FROM pg_stat_replication "
                     "WHERE application_name = :name", name=STANDBY_NAME)
        want = "sync" if self.synchronous else "async"
        return bool(row) and row[0] == "streaming" and row[1] == want

    def wait_replayed(self, timeout: float = 60) -> None:
        """Until the standby has replayed all the WAL the primary had written when called."""
        target = _query(self.primary.url, "SELECT pg_current_wal_lsn()::text")[0]
        wait_for(lambda: _query(self.standby.url, "SELECT pg_last_wal_replay_lsn() >= "
                                "CAST(:lsn AS pg_lsn)", lsn=target)[0],
                 timeout, "the standby's replay")

    def timeline(self, url: str) -> int:
        """The timeline a server writes (readable on a primary, by any role)."""
        name = _query(url, "SELECT pg_walfile_name(pg_current_wal_lsn())")[0]
        return int(name[:8], 16)

    # --- faults ---

    def pause_replay(self, timeout: float = 30) -> None:
        """pg_wal_replay_pause() on the standby, until it reports itself paused. The
        standby still receives WAL, and replays it all if promoted: detach_standby loses."""
        _query(self.standby.url, "SELECT pg_wal_replay_pause()")
        wait_for(lambda: _query(self.standby.url,
                                "SELECT pg_get_wal_replay_pause_state()")[0] == "paused",
                 timeout, "the standby's replay paused")

    def detach_standby(self, timeout: float = 30) -> None:
        """The standby receives nothing more from the primary (its primary_conninfo
        emptied, its walreceiver gone) and its replay is paused: what the primary commits
        from now on (asynchronous only: a synchronous primary's commits wait) is not on
        the standby."""
        _query(self.standby.url, "ALTER SYSTEM SET primary_conninfo = ''", autocommit=True)
        _query(self.standby.url, "SELECT pg_reload_conf()")
        wait_for(lambda: not _query(self.primary.url, "SELECT count(*) FROM "
                                    "pg_stat_replication WHERE application_name = :name",
                                    name=STANDBY_NAME)[0],
                 timeout, "the standby's walreceiver gone")
        self.pause_replay(timeout)

    def freeze_standby(self) -> None:
        """SIGSTOP of the standby's postmaster and children: a standby that stops
        answering, its connections open (thaw_standby lets it go on)."""
        for victim in self._standby_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGSTOP)

    def thaw_standby(self) -> None:
        for victim in self._standby_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGCONT)

    def _standby_processes(self) -> list[int]:
        pid = int((self.standby.data / "postmaster.pid").read_text().split()[0])
        return [pid, *_children(pid)]

    def kill_primary(self) -> None:
        """SIGKILL of the primary's postmaster and of every child at once: no shutdown
        checkpoint, no goodbye to clients or standby."""
        pid = int((self.primary.data / "postmaster.pid").read_text().split()[0])
        victims = [pid, *_children(pid)]
        for victim in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        wait_for(lambda: not any(_alive(victim) for victim in victims), 30,
                 "the primary's processes gone")

    def promote(self, timeout: float = 60) -> float:
        """Promote the standby (its replay pause ends with it); returns the wall-clock
        time when it answers as a primary."""
        _query(self.standby.url, "SELECT pg_promote(true, :wait)", wait=int(timeout))
        wait_for(lambda: not _query(self.standby.url, "SELECT pg_is_in_recovery()")[0],
                 timeout, "the promoted standby out of recovery")
        return time.time()

    def destroy(self) -> None:
        for server in (self.standby, self.primary):
            with contextlib.suppress(Exception):
                server.destroy()


def _query(url: str, sql: str, *, autocommit: bool = False, **params: Any) -> Any:
    """One statement on a fresh connection; its first row."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"),
                              poolclass=sa.pool.NullPool, isolation_level="AUTOCOMMIT",
                              connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as conn:
            result = conn.execute(sa.text(sql), params)
            return result.first() if result.returns_rows else None
    finally:
        engine.dispose()


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def available() -> str | None:
    """Why a primary and standby cannot run here, or None."""
    from tests.acceptance.harness import postgres_bindir

    try:
        bindir = postgres_bindir()
    except Exception as error:  # no binaries at all
        return f"no PostgreSQL binaries: {error}"
    missing = [name for name in ("initdb", "pg_ctl", "pg_basebackup")
               if not (bindir / name).exists()]
    if missing:
        return f"no {', '.join(missing)} in {bindir}"
    if os.geteuid() != 0:
        return "needs root (the servers run as another OS user, and are killed with -9)"
    return None
