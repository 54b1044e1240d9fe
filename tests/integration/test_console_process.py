"""`webhooks console`: without CONSOLE_PASSWORD it exits 1 at once with one line naming it
and opens no port; with it, granian serves the console, Basic auth first, and an event id
full of slashes and dots reaches its page. A body is read only once its request is
authenticated, off the app's threads, within a deadline and a size cap: stalled POSTs
(security review 2026-12c, section 6) never keep the operators out."""

from __future__ import annotations

import base64
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
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


# --- bodies: read after the credentials, off the app's threads, bounded -----------------

STALLED_POSTS = 6  # more than the console's 4 app threads


@pytest.fixture()
def console(clean_db: Engine, database_url: str, tmp_path: Path,
            request: pytest.FixtureRequest) -> Iterator[str]:
    extra: dict[str, str] = getattr(request, "param", {})
    port = processes.free_port()
    log = (tmp_path / "console.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "webhooks", "console", "--host", "127.0.0.1"], cwd=ROOT,
        env=console_env(database_url, port, CONSOLE_PASSWORD=PASSWORD, **extra), stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        processes.wait_http(f"{base}/", timeout=30)
        yield base
    finally:
        processes.stop(process)


def stalled_post(base: str, *, authorization: bool, length: int = 60000) -> socket.socket:
    """A POST that sends its headers and the start of its form, then nothing (the review's
    reproduction)."""
    port = int(base.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port))
    credentials = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    sock.sendall(b"POST /sources/stripe/stripe/pause HTTP/1.1\r\nHost: x\r\n"
                 + (f"Authorization: Basic {credentials}\r\n".encode() if authorization else b"")
                 + b"Content-Type: application/x-www-form-urlencoded\r\n"
                 + f"Content-Length: {length}\r\n\r\ncsrf_token=".encode())
    return sock


def answer_then_close(sock: socket.socket, within: float) -> tuple[bytes, float]:
    """The response's status line, and how long until the server closed the connection
    (the socket's timeout fails the test if it does not within `within` seconds)."""
    started = time.monotonic()
    sock.settimeout(within)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received.split(b"\r\n", 1)[0], time.monotonic() - started


def test_unauthenticated_stalled_posts_get_401_unread_and_the_operator_still_gets_in(
        console: str) -> None:
    socks = [stalled_post(console, authorization=False) for _ in range(STALLED_POSTS)]
    # Announcing more than the form cap changes nothing for a stranger: 401, not 413.
    socks.append(stalled_post(console, authorization=False, length=10_000_000))
    try:
        started = time.monotonic()
        page = requests.get(f"{console}/", auth=(USER, PASSWORD), timeout=5)
        assert page.status_code == 200 and time.monotonic() - started < 5
        for sock in socks:
            status, _ = answer_then_close(sock, within=5)
            assert status == b"HTTP/1.1 401 Unauthorized"
    finally:
        for sock in socks:
            sock.close()


def test_an_authenticated_stalled_post_is_dropped_within_the_deadline(console: str) -> None:
    from webhooks.console.front import BODY_SECONDS

    socks = [stalled_post(console, authorization=True) for _ in range(STALLED_POSTS)]
    too_large = stalled_post(console, authorization=True, length=65 * 1024)
    try:
        status, _ = answer_then_close(too_large, within=5)  # over the form cap: unread
        assert status == b"HTTP/1.1 413 Payload Too Large"
        started = time.monotonic()
        page = requests.get(f"{console}/", auth=(USER, PASSWORD), timeout=5)
        assert page.status_code == 200 and time.monotonic() - started < 5
        for sock in socks:
            status, _ = answer_then_close(sock, within=BODY_SECONDS + 5)
            assert status == b"HTTP/1.1 408 Request Timeout"
    finally:
        for sock in [*socks, too_large]:
            sock.close()


@pytest.mark.parametrize("console", [{"TRUSTED_PROXIES": "1"}], indirect=True)
def test_behind_a_trusted_proxy_one_clients_failures_lock_out_that_client_alone(
        console: str) -> None:
    """Security review 2026-12c, section 13, through the served process: failures counted
    before a body is read (POSTs) and on pages alike, per client as the proxy names it; a
    forged entry left of it, or an `X_Forwarded_For` header, changes nothing."""
    wrong = (USER, "wrong guess 123")
    for n in range(5):
        forged = {"X-Forwarded-For": "198.51.100.2, 203.0.113.7",
                  "X_Forwarded_For": "198.51.100.3"}
        answer = (requests.post(f"{console}/sources/stripe/stripe/pause", auth=wrong,
                                data={"csrf_token": "x"}, headers=forged, timeout=5)
                  if n % 2 else requests.get(f"{console}/", auth=wrong, headers=forged, timeout=5))
        assert answer.status_code == 401
    for attacker in ({"X-Forwarded-For": "203.0.113.7"},
                     {"X-Forwarded-For": "203.0.113.7", "X_Forwarded_For": "198.51.100.4"}):
        assert requests.get(f"{console}/", auth=(USER, PASSWORD), headers=attacker,
                            timeout=5).status_code == 429
    for operator in ("198.51.100.2", "198.51.100.3", "198.51.100.4"):
        assert requests.get(f"{console}/", auth=(USER, PASSWORD), timeout=5,
                            headers={"X-Forwarded-For": operator}).status_code == 200
