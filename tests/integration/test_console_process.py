"""`webhooks console`: without CONSOLE_PASSWORD it exits 1 at once with one line naming it
and opens no port; with it, granian serves the console, Basic auth first, and an event id
full of slashes and dots reaches its page."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import requests
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import broker_url
from tests.console_helpers import PASSWORD, USER, failed_event

ROOT = Path(__file__).resolve().parents[2]


def console_env(database_url: str, port: int, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONSOLE_")}
    return {**env, "DATABASE_URL": database_url, "BROKER_URL": broker_url(),
            "CONSOLE_PORT": str(port), **extra}


def test_without_a_password_it_exits_1_naming_the_variable(database_url: str) -> None:
    port = processes.free_port()
    result = subprocess.run([sys.executable, "-m", "webhooks", "console", "--host", "127.0.0.1"],
                            cwd=ROOT, env=console_env(database_url, port), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "CONSOLE_PASSWORD" in lines[0], result.stderr
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # nothing listened


def test_a_password_under_12_characters_exits_1_naming_it(database_url: str) -> None:
    port = processes.free_port()
    result = subprocess.run([sys.executable, "-m", "webhooks", "console"], cwd=ROOT,
                            env=console_env(database_url, port, CONSOLE_PASSWORD="eleven char"),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "CONSOLE_PASSWORD" in lines[0] and "12" in lines[0], lines


def test_a_bad_port_exits_2_naming_it(database_url: str) -> None:
    env = {**console_env(database_url, 1), "CONSOLE_PORT": "eighty", "CONSOLE_PASSWORD": "x"}
    result = subprocess.run([sys.executable, "-m", "webhooks", "console"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "CONSOLE_PORT" in result.stderr


def test_it_serves_the_console_behind_basic_auth(clean_db: Engine, database_url: str,
                                                  tmp_path: Path) -> None:
    failed_event(clean_db, factories.stripe_event("invoice.paid", factories.invoice(),
                                                  event_id="/../a//b/.?x=%41#"))
    port = processes.free_port()
    log = (tmp_path / "console.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "webhooks", "console", "--host", "127.0.0.1"], cwd=ROOT,
        env=console_env(database_url, port, CONSOLE_PASSWORD=PASSWORD), stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        processes.wait_http(f"{base}/", timeout=30)
        assert requests.get(f"{base}/events", timeout=5).status_code == 401
        listing = requests.get(f"{base}/events", auth=(USER, PASSWORD), timeout=5)
        assert listing.status_code == 200
        link = re.search(r'href="(/events/stripe/[^"]+)"', listing.text)
        assert link
        page = requests.get(base + link.group(1), auth=(USER, PASSWORD), timeout=5)
        assert page.status_code == 200 and 'id="last-error"' in page.text
    finally:
        processes.stop(process)
