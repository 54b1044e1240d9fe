"""`webhooks web` and `webhooks worker` make a Prometheus multiprocess folder for their
processes in the temporary folder, and remove it when they stop (SIGTERM): none is left
behind, run after run."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from tests import processes
from webhooks.shared.settings import Settings


def _env(settings: Settings, tmp: Path, **extra: str) -> dict[str, str]:
    return {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
            "TMPDIR": str(tmp), **extra}


@pytest.fixture(autouse=True)
def _no_folder_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)


def test_web_removes_its_metrics_folder_when_it_stops(settings: Settings,
                                                      tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    port = processes.free_port()
    process = processes.start(["web", "--workers", "2"], _env(settings, tmp, PORT=str(port)),
                              tmp_path / "web.log")
    try:
        processes.wait_http(f"http://127.0.0.1:{port}/healthz")
        answer = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert answer.status_code == 200
        [folder] = tmp.glob("webhooks-web-*")
        assert any(folder.iterdir())  # the server processes write their metrics there
    finally:
        processes.stop(process)
    assert process.returncode is not None
    assert list(tmp.glob("webhooks-web-*")) == []


def test_worker_removes_its_metrics_folder_when_it_stops(settings: Settings,
                                                         tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    process = processes.start(["worker", "--processes", "1", "--threads", "1"],
                              _env(settings, tmp, WORKER_METRICS_PORT="0"),
                              tmp_path / "worker.log")
    log = tmp_path / "worker.log"
    try:
        # Stopped once it runs: a SIGTERM in the middle of Dramatiq's start is another story.
        processes.wait_until(lambda: "ready for action" in log.read_text(), timeout=60)
        [folder] = tmp.glob("webhooks-worker-*")
        assert any(folder.iterdir())  # the worker processes write their metrics there
    finally:
        processes.stop(process)
    assert process.returncode is not None
    assert list(tmp.glob("webhooks-worker-*")) == [], log.read_text()[-2000:]
