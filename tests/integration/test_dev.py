"""`webhooks dev` from a fresh clone, with no DATABASE_URL or BROKER_URL: embedded Postgres
and broker, a signed event sent with `webhooks send` gets processed, the ingest listens on
127.0.0.1 only, Ctrl-C stops everything, the embedded servers included, and no folder
outside `.webhooks/` gains a permission (the clone sits in a 0700 folder, as under /root)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import redis
import requests
import sqlalchemy as sa

from tests import processes
from webhooks import embedded
from webhooks.shared import db
from webhooks.shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def fresh_clone(target: Path) -> Path:
    if (ROOT / ".git").exists():
        subprocess.run(["git", "clone", "-q", str(ROOT), str(target)], check=True)
    else:
        shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(".webhooks", "*.pyc"))
    return target


def test_dev_runs_everything_embedded_and_processes_a_sent_event(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    clone = fresh_clone(home / "clone")
    ancestors = {folder: folder.stat().st_mode for folder in (clone, *clone.parents)}
    port = processes.free_port()
    env = {k: v for k, v in os.environ.items()
           # No XDG_RUNTIME_DIR, as on many servers: no command may warn about it.
           if k not in ("DATABASE_URL", "BROKER_URL", "WEBHOOKS_DATA_DIR", "XDG_RUNTIME_DIR")
           and not k.endswith(("_WEBHOOK_SECRET", "_SIGNING_SECRET"))}
    env.update({"PORT": str(port), "SWEEP_INTERVAL_SECONDS": "1", "PYTHONPATH": str(clone)})
    log = (tmp_path / "dev.log").open("wb")
    dev = subprocess.Popen([sys.executable, "-m", "webhooks", "dev"], cwd=clone, env=env,
                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    data_dir = clone / ".webhooks"
    try:
        processes.wait_http(f"http://127.0.0.1:{port}/readyz", timeout=120)
        sent = subprocess.run(
            [sys.executable, "-m", "webhooks", "send", "stripe",
             "examples/stripe/invoice_paid.json", "--repeat", "3", "--concurrency", "3"],
            cwd=clone, env=env, capture_output=True, text=True, timeout=60,
        )
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert sent.stdout.count('"duplicate":false') == 1
        assert _listening_addresses(port) == {"127.0.0.1"}
        database = embedded.running_postgres_url(data_dir)
        assert database is not None
        engine = sa.create_engine(db.sqlalchemy_url(database))
        with engine.connect() as conn:
            def applied() -> bool:
                return conn.execute(sa.text(
                    "SELECT count(*) FROM jobs WHERE status = 'done'")).scalar() == 1
            processes.wait_until(applied, timeout=60)
            balance = conn.execute(sa.text("SELECT balance FROM accounts")).scalar()
        engine.dispose()
        assert balance == 2500
        stats = subprocess.run([sys.executable, "-m", "webhooks", "stats"], cwd=clone, env=env,
                               capture_output=True, text=True, timeout=60)
        assert stats.returncode == 0 and "received" in stats.stdout
        assert "Warning" not in sent.stderr + stats.stderr, sent.stderr + stats.stderr
    finally:
        os.killpg(dev.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        try:
            assert dev.wait(60) == 0
            # Every process stopped cleanly: none killed at the end of its grace period
            # (granian's 10 s). Granian may log a kill of a server process that already
            # stopped and is not reaped yet, a millisecond after its join (its
            # _stop_workers): a kill at once, not one after a grace period.
            assert not _killed_after_a_grace_period((tmp_path / "dev.log").read_text())
            # The embedded servers it started ended with it.
            assert embedded.running_postgres_url(data_dir) is None
            assert embedded.running_broker_url(data_dir) is None
            assert {folder: folder.stat().st_mode for folder in ancestors} == ancestors
        finally:
            if dev.poll() is None:
                dev.kill()
            embedded.stop_broker(data_dir)
            embedded.stop_postgres(data_dir)


def _listening_addresses(port: int) -> set[str]:
    """The local addresses on which something listens on port."""
    return {conn.laddr.ip for conn in psutil.net_connections(kind="inet")
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port}


def test_the_embedded_redis_in_a_long_path_starts_and_leaves_nothing_outside(
        tmp_path: Path) -> None:
    """A project folder whose `.webhooks/redis.sock` is longer than a unix socket's path can
    be (108 bytes): the kernel would cut it, and the socket land in another folder. The
    socket goes to a private 0700 folder of its own instead, as the embedded Postgres's
    does, which is removed at stop; nothing is written outside `.webhooks/` but that."""
    parent = tmp_path / "projects"
    parent.mkdir()
    project = parent / ("a-long-project-name-" * 7)[:130 - len(str(parent)) - 1]
    assert len(str(project)) == 130
    data_dir = project / ".webhooks"
    data_dir.mkdir(parents=True, mode=0o700)
    assert len(str(embedded.broker_socket(data_dir))) > embedded.SOCKET_PATH_MAX

    def outside() -> set[str]:
        return ({str(path) for path in tmp_path.rglob("*") if data_dir not in path.parents}
                | {str(path) for path in Path(tempfile.gettempdir()).glob("webhooks-redis-*")})

    before = outside()
    try:
        url = embedded.start_broker(data_dir)
        assert embedded.running_broker_url(data_dir) == url
        client = redis.Redis.from_url(url)
        assert client.ping() and client.set("k", "v") and client.get("k") == b"v"
        client.close()
        [folder] = {Path(path) for path in outside() - before}
        assert folder.name.startswith("webhooks-redis-")
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        embedded.stop_broker(data_dir)
    assert embedded.running_broker_url(data_dir) is None
    assert outside() == before


BANNER = "webhooks is running"


def _dev_env(settings: Settings, tmp_path: Path, **extra: str) -> dict[str, str]:
    """`webhooks dev` on the test's servers (no embedded ones), on free ports."""
    return {**os.environ, "DATABASE_URL": settings.database_url or "",
            "BROKER_URL": settings.broker_url or "", "WEBHOOKS_DATA_DIR": str(tmp_path / "data"),
            "PORT": str(processes.free_port()), "CONSOLE_PORT": str(processes.free_port()),
            "WORKER_METRICS_PORT": str(processes.free_port()), "SWEEP_INTERVAL_SECONDS": "1",
            **extra}


def _stop_dev(dev: subprocess.Popen[str]) -> None:
    if dev.poll() is None:
        os.killpg(dev.pid, signal.SIGINT)
        try:
            dev.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait(10)


def test_dev_with_a_handler_module_that_fails_to_import_is_one_line_and_no_banner(
        settings: Settings, tmp_path: Path) -> None:
    """Checked in `dev` itself before anything starts: one line naming the module and its
    error, exit 1; no banner, no traceback, no process started (nothing written to the data
    folder)."""
    env = _dev_env(settings, tmp_path, WEBHOOK_HANDLERS="tests.apps.broken")
    result = subprocess.run([sys.executable, "-m", "webhooks", "dev"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert BANNER not in result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("webhooks: WEBHOOK_HANDLERS: tests.apps.broken: ZeroDivisionError")
    assert not (tmp_path / "data").exists()


def test_dev_prints_the_banner_only_once_every_process_is_up(
        settings: Settings, engine: sa.Engine, tmp_path: Path) -> None:
    """At the moment the banner is printed: web's /healthz answers 200, the console and
    the worker's metrics answer, and the clock has swept (a heartbeat since dev started)."""
    env = _dev_env(settings, tmp_path)
    with engine.connect() as conn:
        before = conn.execute(sa.text("SELECT now()")).scalar_one()
    dev = subprocess.Popen([sys.executable, "-m", "webhooks", "dev"], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    try:
        assert dev.stdout is not None
        seen = []
        for line in dev.stdout:
            seen.append(line)
            if BANNER in line:
                break
        else:
            raise AssertionError("".join(seen))
        # Looked at once, at once: no waiting.
        web = requests.get(f"http://127.0.0.1:{env['PORT']}/healthz", timeout=2)
        console = requests.get(f"http://127.0.0.1:{env['CONSOLE_PORT']}/", timeout=2)
        metrics = requests.get(f"http://127.0.0.1:{env['WORKER_METRICS_PORT']}/metrics",
                               timeout=2)
        with engine.connect() as conn:
            swept = conn.execute(sa.text("SELECT count(*) FROM clock_heartbeats "
                                         "WHERE beat_at >= :before"), {"before": before})
            assert swept.scalar_one() >= 1
        assert web.status_code == 200
        assert console.status_code == 401  # up, asking for its password
        assert metrics.status_code == 200
    finally:
        _stop_dev(dev)
    assert dev.returncode == 0


def test_dev_names_a_process_that_exits_before_it_is_up_and_prints_no_banner(
        settings: Settings, tmp_path: Path) -> None:
    """The console's port is taken: the console exits; `dev` says which, with its exit
    code, stops the others and exits 1, without a banner."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = _dev_env(settings, tmp_path, CONSOLE_PORT=str(taken.getsockname()[1]))
        result = subprocess.run([sys.executable, "-m", "webhooks", "dev"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=180)
    shown = result.stdout + result.stderr
    assert result.returncode == 1, shown
    assert BANNER not in result.stdout, shown
    exits = [line for line in result.stderr.splitlines() if "exited with" in line]
    assert len(exits) == 1, shown
    assert re.fullmatch(r"webhooks: console exited with -?\d+ before it was up; stopping",
                        exits[0]), shown


def _killed_after_a_grace_period(log: str) -> list[str]:
    """The lines of a server process killed a second or more after its server began to
    shut down (the log's times are to the second)."""
    killed, began = [], None
    for line in log.splitlines():
        moment = re.match(r"(\d\d):(\d\d):(\d\d) ", line)
        if moment is None:
            continue
        seconds = int(moment[1]) * 3600 + int(moment[2]) * 60 + int(moment[3])
        if "Shutting down granian" in line and began is None:
            began = seconds
        if "refused to gracefully stop" in line and (began is None or seconds - began >= 2):
            killed.append(line)
    return killed
