"""The system under test: a private database and broker, and the Procfile's processes
started as `webhooks web` / `webhooks worker`, with their memory and CPU read from /proc."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import sqlalchemy as sa
from sqlalchemy.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
STRIPE_SECRET = "whsec_benchmark_secret"
# webhook_dedup too: a key left there would make the next seeding's event of that id a
# duplicate (its row skipped by the dedup guard), and its job an orphan.
TABLES = ("ledger_entries", "outbox", "accounts", "subscriptions", "webhook_duplicates",
          "jobs", "webhook_events", "webhook_dedup", "event_search", "paused_providers",
          "notifications", "notification_deliveries", "notification_windows",
          "notification_health")


@dataclass(frozen=True)
class Target:
    """Where the benchmark runs: its own database and broker, never the caller's data."""

    database_url: str  # postgresql://... of the private benchmark database
    broker_url: str
    logs: Path
    code: Path = ROOT  # the checkout whose processes are measured (another one: before/after)

    @property
    def env(self) -> dict[str, str]:
        # The reference app, which the scenarios' invoice jobs measure (an older checkout,
        # with --code, ran it without being named).
        return {"DATABASE_URL": self.database_url, "BROKER_URL": self.broker_url,
                "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "WEBHOOK_HANDLERS": "webhooks.ledger"}

    def engine(self) -> Engine:
        from webhooks.shared.db import sqlalchemy_url

        return sa.create_engine(sqlalchemy_url(self.database_url), pool_size=2)


def add_server_options(parser: argparse.ArgumentParser, broker_db: int) -> None:
    """A separate tool's --admin-url (the Postgres it makes its database beside; default
    $BENCH_ADMIN_URL) and --broker-url (Redis db `broker_db`, flushed by prepare)."""
    parser.add_argument("--admin-url", default=os.environ.get(
        "BENCH_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--broker-url", default=f"redis://127.0.0.1:6379/{broker_db}")


def create_database(admin_url: str, name: str) -> str:
    """Database `name` (re)created, empty, on admin_url's server; its URL."""
    from webhooks.shared.db import sqlalchemy_url

    admin = sa.create_engine(sqlalchemy_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def autocommit(engine: Engine, *statements: str) -> None:
    """Each statement in a transaction of its own (VACUUM, CHECKPOINT, CREATE EXTENSION)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for statement in statements:
            conn.execute(sa.text(statement))


def create_extension(engine: Engine, name: str) -> bool:
    """The extension created in engine's database if the server has it; False if not."""
    with engine.connect() as conn:
        if not conn.execute(sa.text("SELECT 1 FROM pg_available_extensions WHERE name = :name"),
                            {"name": name}).first():
            return False
    autocommit(engine, f"CREATE EXTENSION IF NOT EXISTS {name}")
    return True


def prepare(admin_url: str, name: str, broker_url: str, logs: Path,
            code: Path = ROOT) -> Target:
    """(Re)create database `name` next to admin_url's, migrate it, empty the broker db."""
    url = create_database(admin_url, name)
    logs.mkdir(parents=True, exist_ok=True)
    target = Target(url, broker_url, logs, code.resolve())
    # Anything this process imports from the project (worker.actors, the clock's sweep)
    # reads Settings from the environment: point it at the benchmark's, never the embedded.
    os.environ.update(target.env)
    result = subprocess.run(webhooks_command(target, "migrate"), env={**os.environ, **target.env},
                            cwd=target.code, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"migrate failed: {result.stderr.strip()}")
    flush_broker(broker_url)
    return target


def flush_broker(broker_url: str) -> None:
    import redis

    redis.Redis.from_url(broker_url).flushdb()


def reset(target: Target) -> None:
    """Empty the tables the scenarios fill (those the measured checkout's schema has: an
    older one, with --code, lacks the newer tables)."""
    engine = target.engine()
    with engine.begin() as conn:
        present = [name for name in TABLES
                   if conn.execute(sa.text("SELECT to_regclass(:name)"), {"name": name}).scalar()]
        conn.execute(sa.text(f"TRUNCATE {', '.join(present)} RESTART IDENTITY CASCADE"))
        conn.execute(sa.text("CHECKPOINT"))
    engine.dispose()
    flush_broker(target.broker_url)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def webhooks_command(target: Target, *args: str) -> list[str]:
    """`webhooks ARGS` as the Procfile runs it (the console script next to this Python),
    or from another checkout when target.code is one."""
    if target.code != ROOT:  # the command's module there: webhooks, or shared.cli before it
        module = "webhooks" if (target.code / "webhooks" / "cli.py").exists() else "shared.cli"
        return [sys.executable, "-m", module, *args]
    script = Path(sys.executable).with_name("webhooks")
    if script.exists():
        return [str(script), *args]
    found = shutil.which("webhooks")
    return [found, *args] if found else [sys.executable, "-m", "webhooks", *args]


@dataclass
class Process:
    """A started process group, with the peak memory and CPU of every process in it."""

    name: str
    popen: subprocess.Popen[bytes]
    peak_rss: dict[int, tuple[str, int]] = field(default_factory=dict)  # pid: (role, bytes)

    def tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.popen.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def sample_memory(self) -> None:
        """Record each process's peak RSS (VmHWM) while it is alive."""
        for proc in self.tree():
            try:
                peak = _vm_hwm(proc.pid)
                role = "main" if proc.pid == self.popen.pid else "child"
            except (psutil.NoSuchProcess, OSError):
                continue
            self.peak_rss[proc.pid] = (role, max(peak, self.peak_rss.get(proc.pid, ("", 0))[1]))

    def cpu_seconds(self) -> float:
        return sum(cpu for proc in self.tree() if (cpu := _cpu_seconds(proc)) is not None)

    def memory_report(self) -> list[dict[str, Any]]:
        self.sample_memory()
        return [{"process": self.name, "pid": pid, "role": role,
                 "peak_rss_mb": round(rss / 2**20, 1)}
                for pid, (role, rss) in sorted(self.peak_rss.items())]


def _cpu_seconds(proc: psutil.Process) -> float | None:
    """User + system CPU seconds of one process; None once it has exited."""
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def _vm_hwm(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def start(name: str, args: list[str], target: Target, extra_env: dict[str, str] | None = None,
          command: list[str] | None = None) -> Process:
    log = (target.logs / f"{name}.log").open("ab")
    env = {**os.environ, **target.env, **(extra_env or {})}
    if target.code != ROOT:
        env["PYTHONPATH"] = str(target.code)
    popen = subprocess.Popen(command or webhooks_command(target, *args), cwd=target.code, env=env,
                             stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
    return Process(name, popen)


def stop(process: Process) -> None:
    process.sample_memory()
    if process.popen.poll() is None:
        try:
            os.killpg(process.popen.pid, signal.SIGTERM)
            process.popen.wait(20)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            os.killpg(process.popen.pid, signal.SIGKILL)
            process.popen.wait(5)


def wait_http(url: str, process: Process, timeout: float = 60) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise RuntimeError(f"{process.name} exited with {process.popen.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                if answer.status < 500:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


@contextmanager
def web(target: Target, server: list[str] | None = None, extra_env: dict[str, str] | None = None,
        name: str = "web") -> Iterator[tuple[str, Process]]:
    """`webhooks web` on a free port (or `server`, a command line honouring $PORT)."""
    port = free_port()
    process = start(name, ["web"], target, {**(extra_env or {}), "PORT": str(port)},
                    command=[part.replace("$PORT", str(port)) for part in server] if server
                    else None)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthz", process)
        yield base, process
    finally:
        stop(process)


# --- servers this benchmark did not start ------------------------------------------------

# Postgres's own processes, which serve every database on the server (titles "postgres:
# [cluster:] NAME"); a backend's title names its user and database instead.
POSTGRES_BACKGROUND = ("checkpointer", "background writer", "walwriter", "autovacuum launcher",
                       "logical replication launcher", "archiver", "stats collector",
                       "walsender", "startup")

Finder = Callable[[], Iterable[tuple[psutil.Process, str]]]  # (process, kind)


class ServerCpu:
    """CPU seconds, per kind, of server processes the benchmark did not start (Postgres,
    Redis), from start() to the last sample(). Postgres runs a process per connection and
    connections come and go, so sample() must be called often while the measurement runs:
    a process counts from start() (or its birth) to the last sample that saw it alive."""

    def __init__(self, finders: Iterable[Finder]) -> None:
        self.finders = list(finders)
        self.seen: dict[int, tuple[str, float, float]] = {}  # pid: (kind, first, latest)

    def start(self) -> None:
        self.seen = {}
        for proc, kind in self._processes():
            if (cpu := _cpu_seconds(proc)) is not None:
                self.seen[proc.pid] = (kind, cpu, cpu)

    def sample(self) -> None:
        for proc, kind in self._processes():
            if (cpu := _cpu_seconds(proc)) is not None:
                # born after start(): all its CPU was spent during the measurement
                kind, first, _ = self.seen.get(proc.pid, (kind, 0.0, 0.0))
                self.seen[proc.pid] = (kind, first, cpu)

    def seconds(self) -> dict[str, float]:
        """CPU seconds per kind since start(); a kind whose processes could not be read
        (a server on another machine) is absent."""
        self.sample()
        totals: dict[str, float] = {}
        for kind, first, latest in self.seen.values():
            totals[kind] = totals.get(kind, 0.0) + latest - first
        return totals

    @contextmanager
    def sampling(self, interval: float = 0.25) -> Iterator[None]:
        """sample() every `interval` seconds from a thread, while a measurement that
        cannot call it (a load generator's run) goes on."""
        done = threading.Event()

        def loop() -> None:
            while not done.wait(interval):
                self.sample()

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _processes(self) -> Iterator[tuple[psutil.Process, str]]:
        for finder in self.finders:
            yield from finder()


def server_cpu(target: Target, exclude: Collection[int] = ()) -> ServerCpu:
    """Postgres ("postgres_backends": the benchmark database's connections, less the
    `exclude` backend pids, the benchmark's own polling; "postgres_background": the server's
    own processes) and Redis ("redis"), when they run on this machine."""
    finders = [finder for finder in (_postgres_finder(target, exclude),
                                     _redis_finder(target.broker_url)) if finder]
    return ServerCpu(finders)


def postmaster(target: Target) -> psutil.Process | None:
    """The benchmark database's server process, or None when it is not on this machine."""
    engine = target.engine()
    try:
        with engine.connect() as conn:
            pid, database = conn.execute(
                sa.text("SELECT pg_backend_pid(), current_database()")).one()
            backend = psutil.Process(pid)
            if database not in " ".join(backend.cmdline()).split():
                return None  # that pid is not our backend: another machine or namespace
            return psutil.Process(backend.ppid())
    except psutil.Error:
        return None
    finally:
        engine.dispose()


def other_databases(target: Target) -> list[str]:
    """The server's databases besides the benchmark's, `postgres` and the templates:
    someone else's work, when there are any."""
    engine = target.engine()
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.text(
                "SELECT datname FROM pg_database WHERE NOT datistemplate "
                "AND datname NOT IN ('postgres', current_database()) ORDER BY 1")).scalars())
    finally:
        engine.dispose()


def _postgres_finder(target: Target, exclude: Collection[int]) -> Finder | None:
    """The postmaster's children, by kind; other databases' backends (other work
    on a shared server) are left out. None when the server is not on this machine."""
    server = postmaster(target)
    if server is None:
        return None
    database = sa.make_url(target.database_url).database or ""
    kinds: dict[int, str | None] = {}
    skipped = set(exclude)

    def kind(proc: psutil.Process) -> str | None:
        if proc.pid not in kinds:
            title = " ".join(proc.cmdline()).split()
            if database in title:
                kinds[proc.pid] = None if proc.pid in skipped else "postgres_backends"
            elif any(name in " ".join(title) for name in POSTGRES_BACKGROUND):
                kinds[proc.pid] = "postgres_background"
            else:
                kinds[proc.pid] = None  # another database's backend
        return kinds[proc.pid]

    def find() -> Iterator[tuple[psutil.Process, str]]:
        try:
            children = server.children()
        except psutil.Error:
            return
        for proc in [server, *children]:
            try:
                found = "postgres_background" if proc.pid == server.pid else kind(proc)
            except psutil.Error:
                continue
            if found:
                yield proc, found

    return find


def _redis_finder(broker_url: str) -> Finder | None:
    """The redis-server serving broker_url's port, when it runs on this machine."""
    url = urlsplit(broker_url)
    if url.scheme != "redis" or url.hostname not in ("127.0.0.1", "localhost"):
        return None
    port = f":{url.port or 6379}"
    server = next((proc for proc in psutil.process_iter(["name", "cmdline"])
                   if proc.info["name"] == "redis-server"
                   and any(port in part for part in proc.info["cmdline"] or ())), None)
    if server is None:
        return None

    def find() -> list[tuple[psutil.Process, str]]:
        return [(server, "redis")]

    return find


def machine_busy_seconds() -> float:
    """CPU seconds all the machine's cores spent busy (not idle, not waiting on I/O) since
    boot: everything on the machine, other work included."""
    times = psutil.cpu_times()._asdict()
    idle = ("idle", "iowait", "guest", "guest_nice")  # guest time is counted in user/nice
    return float(sum(value for name, value in times.items() if name not in idle))


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def drop(admin_url: str, name: str) -> None:
    from webhooks.shared.db import sqlalchemy_url

    admin = sa.create_engine(sqlalchemy_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
