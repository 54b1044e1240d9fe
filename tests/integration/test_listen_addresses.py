"""What the Procfile starts with no host given listens where it should: the ingest on every
interface (the platform's router reaches it), the console and the worker metrics on
127.0.0.1 only (payloads and customer emails behind Basic auth; metrics with no auth)."""

from __future__ import annotations

from pathlib import Path

import psutil

from tests import processes
from tests.console_helpers import PASSWORD
from webhooks.shared.settings import Settings


def listening(port: int) -> set[str]:
    return {conn.laddr.ip for conn in psutil.net_connections(kind="inet")
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port}


def test_console_and_worker_metrics_listen_on_loopback_unless_told(
        settings: Settings, tmp_path: Path) -> None:
    console_port, metrics_port = processes.free_port(), processes.free_port()
    env = {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
           "CONSOLE_PORT": str(console_port), "CONSOLE_PASSWORD": PASSWORD,
           "WORKER_METRICS_PORT": str(metrics_port)}
    console = processes.start(["console"], env, tmp_path / "console.log")
    worker = processes.start(["worker", "--processes", "1", "--threads", "1"], env,
                             tmp_path / "worker.log")
    try:
        processes.wait_http(f"http://127.0.0.1:{console_port}/", timeout=30)
        processes.wait_http(f"http://127.0.0.1:{metrics_port}/metrics", timeout=60)
        assert listening(console_port) == {"127.0.0.1"}
        assert listening(metrics_port) == {"127.0.0.1"}
    finally:
        processes.stop(console)
        processes.stop(worker)
    opened = processes.start(["console"], {**env, "CONSOLE_HOST": "0.0.0.0"},
                             tmp_path / "console-open.log")
    try:
        processes.wait_http(f"http://127.0.0.1:{console_port}/", timeout=30)
        assert listening(console_port) == {"0.0.0.0"}
    finally:
        processes.stop(opened)
