"""Guarantee 7 (docs/guarantees.md): no Procfile process ever starts an embedded server.
Without DATABASE_URL (or BROKER_URL) each one exits 1 at once with one line naming the
variable, opens no port and leaves nothing behind: a deploy that forgot a variable must
never acknowledge webhooks into a local folder."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests import processes

ROOT = Path(__file__).resolve().parents[2]


def procfile() -> dict[str, str]:
    entries = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        name, _, command = line.partition(":")
        if command.strip():
            entries[name.strip()] = command.strip()
    return entries


def run_entry(command: str, env: dict[str, str],
              cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run(["sh", "-c", command], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=60)
    return result, time.monotonic() - started


def base_env(port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "BROKER_URL", "WEBHOOKS_DATA_DIR")}
    env.update({"PORT": str(port), "WORKER_METRICS_PORT": str(processes.free_port()),
                "STRIPE_WEBHOOK_SECRET": "whsec_test",
                # `webhooks` as the Procfile runs it: the console script of this Python
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    return env


def left_running(folder: Path) -> list[str]:
    """Processes whose command line or working folder is in `folder` (a daemonized server)."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if str(folder) in cmdline or str(folder) == (process.info["cwd"] or ""):
            found.append(cmdline)
    return found


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_the_procfile_has_the_specified_entries() -> None:
    assert {"release", "web", "worker", "clock"} <= set(procfile())


@pytest.mark.parametrize("entry", sorted(procfile()))
def test_each_entry_without_database_url_exits_1_naming_it(entry: str, tmp_path: Path) -> None:
    port = processes.free_port()
    result, seconds = run_entry(procfile()[entry], base_env(port), tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "DATABASE_URL" in lines[0], result.stderr
    assert seconds < 20
    assert list(tmp_path.iterdir()) == []  # no .webhooks/ data folder
    assert left_running(tmp_path) == []
    assert port_free(port)


@pytest.mark.parametrize("entry", ["web", "worker", "clock"])
def test_each_process_without_broker_url_exits_1_naming_it(entry: str, tmp_path: Path,
                                                           database_url: str) -> None:
    port = processes.free_port()
    env = {**base_env(port), "DATABASE_URL": database_url}
    result, _ = run_entry(procfile()[entry], env, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "BROKER_URL" in lines[0], result.stderr
    assert list(tmp_path.iterdir()) == []
    assert left_running(tmp_path) == []
    assert port_free(port)


def test_operators_commands_without_a_dev_database_exit_1_naming_it(tmp_path: Path) -> None:
    for args in (["stats"], ["replay", "--all", "--dry-run"], ["prune"]):
        result, _ = run_entry(shlex.join(["webhooks", *args]), base_env(processes.free_port()),
                              tmp_path)
        assert result.returncode == 1, args
        assert "DATABASE_URL" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
