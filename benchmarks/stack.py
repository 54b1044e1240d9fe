"""The system under test: a private database and broker, and the Procfile's processes
started as `webhooks web` / `webhooks worker`, with their memory and CPU read from /proc."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa
from sqlalchemy.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
STRIPE_SECRET = "whsec_benchmark_secret"
TABLES = ("ledger_entries", "outbox", "accounts", "subscriptions", "webhook_duplicates",
          "jobs", "webhook_events")


@dataclass(frozen=True)
class Target:
    """Where the benchmark runs: its own database and broker, never the caller's data."""

    database_url: str  # postgresql://... of the private benchmark database
    broker_url: str
    logs: Path
    code: Path = ROOT  # the checkout whose processes are measured (another one: before/after)

    @property
    def env(self) -> dict[str, str]:
        return {"DATABASE_URL": self.database_url, "BROKER_URL": self.broker_url,
                "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET}

    def engine(self) -> Engine:
        from shared.db import sqlalchemy_url

        return sa.create_engine(sqlalchemy_url(self.database_url), pool_size=2)


def prepare(admin_url: str, name: str, broker_url: str, logs: Path,
            code: Path = ROOT) -> Target:
    """(Re)create database `name` next to admin_url's, migrate it, empty the broker db."""
    from shared.db import sqlalchemy_url

    admin = sa.create_engine(sqlalchemy_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
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
    engine = target.engine()
    with engine.begin() as conn:
        conn.execute(sa.text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
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
        total = 0.0
        for proc in self.tree():
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                continue
        return total

    def memory_report(self) -> list[dict[str, Any]]:
        self.sample_memory()
        return [{"process": self.name, "pid": pid, "role": role,
                 "peak_rss_mb": round(rss / 2**20, 1)}
                for pid, (role, rss) in sorted(self.peak_rss.items())]


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


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def drop(admin_url: str, name: str) -> None:
    from shared.db import sqlalchemy_url

    admin = sa.create_engine(sqlalchemy_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
