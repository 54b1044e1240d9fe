"""`webhooks dev` from a fresh clone, with no DATABASE_URL or BROKER_URL: embedded Postgres
and broker, a signed event sent with `webhooks send` gets processed, the ingest listens on
127.0.0.1 only, Ctrl-C stops everything, the embedded servers included, and no folder
outside `.webhooks/` gains a permission (the clone sits in a 0700 folder, as under /root)."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import redis
import sqlalchemy as sa

from tests import processes
from webhooks import embedded
from webhooks.shared import db

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
            # Every process stopped cleanly (none killed at the end of a grace period).
            assert "refused to gracefully stop" not in (tmp_path / "dev.log").read_text()
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
