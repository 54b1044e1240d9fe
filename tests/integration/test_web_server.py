"""`webhooks web` as deployed (granian serving the Flask app): what the server adds to
the app, on a real process, over real sockets."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from webhooks.shared.settings import Settings

MAX_BODY = 4096


@pytest.fixture()
def server(settings: Settings, clean_db,  # type: ignore[no-untyped-def]
           tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = processes.free_port()
    env = {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
           "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "MAX_BODY_BYTES": str(MAX_BODY),
           "PORT": str(port)}
    process = processes.start(["web", "--workers", "2", "--threads", "2"], env,
                              tmp_path / "web.log")
    base = f"http://127.0.0.1:{port}"
    try:
        processes.wait_http(f"{base}/healthz")
        yield base, process
    finally:
        processes.stop(process)


def delivery(event_id: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(factories.stripe_event("invoice.paid", factories.invoice(),
                                             event_id=event_id)).encode()
    return body, {"Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET),
                  "Content-Type": "application/json"}


def test_oversized_is_refused_before_the_body_is_sent_and_the_connection_closed(server) -> None:  # type: ignore[no-untyped-def]
    base, _ = server
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        # Headers only: a body of MAX_BODY + 1 bytes is announced and never sent.
        sock.sendall(f"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: "
                     f"{MAX_BODY + 1}\r\nStripe-Signature: t=1,v1=00\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            assert chunk, "the connection closed without an answer"
            answer += chunk
        head = answer.split(b"\r\n\r\n")[0].decode().lower()
        assert head.startswith("http/1.1 413")
        assert "connection: close" in head
        # The server then closes its side rather than read (or wait for) the body.
        sock.settimeout(5)
        while sock.recv(4096):
            pass


def test_a_keep_alive_client_goes_on_after_a_413(server, clean_db) -> None:  # type: ignore[no-untyped-def]
    base, _ = server
    session = requests.Session()
    body, headers = delivery("evt_after_413")
    too_big = body[:-1] + b', "pad": "' + b"x" * MAX_BODY + b'"}'
    assert session.post(f"{base}/webhooks/stripe", data=too_big, headers=headers,
                        timeout=10).status_code == 413
    answer = session.post(f"{base}/webhooks/stripe", data=body, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["duplicate"] is False


def server_processes(process: subprocess.Popen[bytes]) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True)
    return [int(pid) for pid in out.stdout.split()]


def test_a_killed_server_process_is_replaced(server) -> None:  # type: ignore[no-untyped-def]
    base, process = server
    before = server_processes(process)
    assert len(before) == 2
    os.kill(before[0], signal.SIGKILL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        now = server_processes(process)
        if len(now) == 2 and before[0] not in now:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"server processes {before} -> {server_processes(process)}")
    assert process.poll() is None
    body, headers = delivery("evt_after_kill")
    for _ in range(4):  # both processes answer
        assert requests.post(f"{base}/webhooks/stripe", data=body, headers=headers,
                             timeout=10).status_code == 200


def test_sigterm_stops_the_server_cleanly(server) -> None:  # type: ignore[no-untyped-def]
    _, process = server
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(20) == 0


def test_a_body_cut_short_is_400_and_writes_nothing(server, clean_db) -> None:  # type: ignore[no-untyped-def]
    base, _ = server
    port = int(base.rsplit(":", 1)[1])
    body, headers = delivery("evt_cut_short")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}"
                     f"\r\nStripe-Signature: {headers['Stripe-Signature']}\r\n\r\n".encode()
                     + body[:-10])
        sock.shutdown(socket.SHUT_WR)  # the client stops sending, 10 bytes short
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    with clean_db.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM webhook_events").scalar_one() == 0


def test_clients_that_stop_sending_hold_no_thread_and_lose_their_connection(server) -> None:  # type: ignore[no-untyped-def]
    """Clients that stall (docs/guarantees.md, 5): 32 connections send headers and one byte of a
    body, then nothing. Signed deliveries still get their 200 within 2 s (the server runs
    2 processes of 2 app threads here), and each stalled client is answered 408 and loses
    its connection within 30 s."""
    base, _ = server
    port = int(base.rsplit(":", 1)[1])
    stalled = []
    for _ in range(32):
        sock = socket.create_connection(("127.0.0.1", port), timeout=35)
        sock.sendall(b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 2000\r\n\r\n{")
        stalled.append(sock)
    started = time.monotonic()
    try:
        time.sleep(0.5)
        for n in range(8):
            body, headers = delivery(f"evt_beside_stalled_{n}")
            sent = time.monotonic()
            response = requests.post(f"{base}/webhooks/stripe", data=body, headers=headers,
                                     timeout=5)
            assert response.status_code == 200 and time.monotonic() - sent < 2.0
        assert requests.get(f"{base}/healthz", timeout=2).status_code == 200
        for sock in stalled:
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
        assert time.monotonic() - started < 30
        scrape = requests.get(f"{base}/metrics", timeout=5).text
        assert 'provider="stripe",reason="body_timeout",source="stripe"} 32.0' in scrape
    finally:
        for sock in stalled:
            sock.close()


def test_no_path_reads_a_body_announced_over_the_limit(server) -> None:  # type: ignore[no-untyped-def]
    """Not only the webhook routes: a POST anywhere announcing a gigabyte is answered 413
    from its headers, and nothing of it is read into memory."""
    base, _ = server
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n")
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:100]



def test_the_front_and_the_route_answer_every_delivery_alike(server, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """`webhooks web` answers a delivery through ingest.webhooks.answer straight from the
    front; the Flask route (tracing on, the tests' client) is an adapter over the same
    function. The same status, body and headers for each kind of answer."""
    from webhooks.ingest.app import create_app

    base, _ = server
    client = create_app(dataclasses.replace(settings, max_body_bytes=MAX_BODY)).test_client()

    def cases(name: str) -> list[tuple[str, bytes, dict[str, str]]]:
        body, headers = delivery(f"evt_{name}_alike")
        return [
            ("/webhooks/stripe", body, headers),  # recorded
            ("/webhooks/stripe", body, headers),  # a duplicate
            ("/webhooks/stripe", body, {**headers, "Stripe-Signature": "t=1,v1=00"}),
            ("/webhooks/stripe/nosuch", body, headers),  # a source not configured
            ("/webhooks/github", body, headers),  # a provider not configured
            ("/webhooks/stripe", b"x" * (MAX_BODY + 1), headers),  # over the limit
        ]

    via_front = [requests.post(base + path, data=body, headers=sent, timeout=10)
                 for path, body, sent in cases("front")]
    via_route = [client.post(path, data=body, headers=sent)
                 for path, body, sent in cases("route")]
    assert [answer.status_code for answer in via_front] == [200, 200, 400, 400, 404, 413]
    assert '"duplicate":false' in via_front[0].text and '"duplicate":true' in via_front[1].text
    for front, route in zip(via_front, via_route, strict=True):
        assert front.status_code == route.status_code
        assert front.text.replace("front", "") == route.get_data(as_text=True).replace("route", "")
        for name in ("Content-Type", "Retry-After"):
            assert front.headers.get(name) == route.headers.get(name), name
        if route.status_code in (403, 413):  # the body left unread: the connection closes
            assert front.headers.get("Connection") == route.headers.get("Connection") == "close"
