"""`webhooks web` against hostile connections, on a real process over real sockets
(docs/guarantees.md, 5; security review 2026-12c, sections 1, 2, 3, 5 and 7): sockets
that never send a byte, header names that alias the ones we read, HTTP/2 header floods,
and more large bodies at once than a process should hold."""

from __future__ import annotations

import json
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from webhooks.ingest.server import HEADER_SECONDS
from webhooks.shared import rsgi
from webhooks.shared.settings import Settings

MAX_BODY = 4096


@contextmanager
def web(settings: Settings, log: Path, *, workers: int = 2,
        **env: str) -> Iterator[tuple[str, int]]:
    port = processes.free_port()
    process = processes.start(
        ["web", "--workers", str(workers), "--threads", "2"],
        {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
         "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "MAX_BODY_BYTES": str(MAX_BODY),
         "PORT": str(port), **env}, log)
    base = f"http://127.0.0.1:{port}"
    try:
        processes.wait_http(f"{base}/healthz")
        yield base, port
    finally:
        processes.stop(process)


def delivery(event_id: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(factories.stripe_event("invoice.paid", factories.invoice(),
                                             event_id=event_id)).encode()
    return body, {"Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET),
                  "Content-Type": "application/json"}


def delivered_fast(base: str, event_id: str, within: float = 2.0) -> None:
    """A signed delivery gets its 200 within `within` seconds."""
    body, headers = delivery(event_id)
    sent = time.monotonic()
    answer = requests.post(f"{base}/webhooks/stripe", data=body, headers=headers,
                           timeout=within + 3)
    took = time.monotonic() - sent
    assert answer.status_code == 200, answer.text
    assert took < within, f"{event_id}: 200 after {took:.2f} s"


def answer_of(sock: socket.socket, timeout: float = 10) -> bytes:
    """Everything the server sends until it closes the connection (or `timeout`)."""
    sock.settimeout(timeout)
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return answer


def enough_descriptors(needed: int) -> None:
    """The soft limit of open files raised (up to the hard one) for this test's sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"needs {needed} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


# 1. Silent connections

def test_silent_connections_never_starve_deliveries_and_are_closed(settings: Settings,
                                                                   clean_db,  # type: ignore[no-untyped-def]
                                                                   tmp_path: Path) -> None:
    """1,100 connections that never send a byte (granian's default let 512 per process in,
    the rest waited in the listen backlog, and none was ever closed): signed deliveries
    beside them get 200 within 2 s, and each silent one is closed within HEADER_SECONDS
    of its connect."""
    enough_descriptors(4096)
    with web(settings, tmp_path / "web.log") as (base, port):
        silent: list[socket.socket] = []
        try:
            for _ in range(1100):
                silent.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            opened = time.monotonic()
            time.sleep(0.5)
            for n in range(8):
                delivered_fast(base, f"evt_beside_silent_{n}")
            sent = time.monotonic()
            assert requests.get(f"{base}/healthz", timeout=5).status_code == 200
            assert time.monotonic() - sent < 2.0
            # Each silent socket is closed by the server (EOF, no answer) by the deadline.
            selector = selectors.DefaultSelector()
            for sock in silent:
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ)
            open_ = len(silent)
            deadline = opened + HEADER_SECONDS + 3
            while open_ and time.monotonic() < deadline:
                for key, _ in selector.select(timeout=0.5):
                    sock = key.fileobj  # type: ignore[assignment]
                    try:
                        data = sock.recv(4096)
                    except ConnectionResetError:
                        data = b""
                    assert data == b"", data[:100]
                    selector.unregister(sock)
                    open_ -= 1
            closed_after = time.monotonic() - opened
            assert open_ == 0, f"{open_} of 1100 still open after {closed_after:.1f} s"
            selector.close()
        finally:
            for sock in silent:
                sock.close()
        # And the process goes on as before.
        delivered_fast(base, "evt_after_silent")


# 2 and 5. Header names that alias another

def chunked_flood(port: int, path: str, extra: str, total: int) -> tuple[bytes, int]:
    """A chunked body of `total` bytes in 64 KiB chunks, sent until the server stops
    taking it; the answer and how many bytes went out."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     f"{extra}\r\n".encode())
        frame = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
        try:
            while sent < total:
                sock.sendall(frame)
                sent += 0x10000
            sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        return answer_of(sock), sent


@pytest.mark.parametrize("path", ["/healthz", "/webhooks/stripe", "/no/such/path"])
def test_an_underscore_content_length_does_not_lift_the_limit_of_a_chunked_body(
        settings: Settings, clean_db, tmp_path: Path, path: str) -> None:  # type: ignore[no-untyped-def]
    """Review 2026-12c section 2: `Content_Length: 1` beside a chunked body made the front
    read the whole body uncounted (300 MB in 0.6 s). On any path the body is now read only
    up to MAX_BODY_BYTES: 413, and the connection closed long before 64 MiB went out."""
    with web(settings, tmp_path / "web.log", workers=1) as (_, port):
        for extra in ("Content_Length: 1\r\n", "Content-Length: 1\r\n"):
            answer, sent = chunked_flood(port, path, extra, 64 << 20)
            if answer:
                assert answer.startswith(b"HTTP/1.1 413") or answer.startswith(b"HTTP/1.1 400"), \
                    (extra, answer[:100])
            assert sent < 64 << 20, f"{extra.strip()}: all of the body was taken"


def raw_request(port: int, head: str, body: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        return answer_of(sock)


def test_an_underscore_x_forwarded_for_does_not_pass_the_allowlist(
        settings: Settings, clean_db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Review 2026-12c section 5: behind one proxy (TRUSTED_PROXIES=1), a client's
    `X_Forwarded_For: <allowed>` after the proxy's `X-Forwarded-For` was joined to it and
    became the right-most entry. It is now dropped, in either order."""
    env = {"TRUSTED_PROXIES": "1", "STRIPE_ALLOWED_IPS": "3.3.3.3"}
    with web(settings, tmp_path / "web.log", workers=1, **env) as (_, port):
        def post(forwarded: list[str], event_id: str) -> bytes:
            body, headers = delivery(event_id)
            lines = "".join(f"{line}\r\n" for line in forwarded)
            head = (f"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                    f"Stripe-Signature: {headers['Stripe-Signature']}\r\n{lines}\r\n")
            return raw_request(port, head, body)

        assert post(["X-Forwarded-For: 3.3.3.3"], "evt_xff_allowed").startswith(b"HTTP/1.1 200")
        assert post(["X-Forwarded-For: 9.9.9.9"], "evt_xff_refused").startswith(b"HTTP/1.1 403")
        forged = post(["X-Forwarded-For: 9.9.9.9", "X_Forwarded_For: 3.3.3.3"], "evt_xff_after")
        assert forged.startswith(b"HTTP/1.1 403"), forged[:200]
        forged = post(["X_Forwarded_For: 3.3.3.3", "X-Forwarded-For: 9.9.9.9"], "evt_xff_before")
        assert forged.startswith(b"HTTP/1.1 403"), forged[:200]


# 3. Header floods

def h2_header_flood(port: int, repeats: int) -> tuple[bytes, float]:
    """Review 2026-12c section 3's request: h2c with prior knowledge, one stream whose
    HEADERS repeat `x-a` (HPACK-indexed: a byte each on the wire). What came back before
    the server closed, and when."""
    import h2.config
    import h2.connection

    connection = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        connection.initiate_connection()
        sock.sendall(connection.data_to_send())
        headers = [(":method", "GET"), (":path", "/healthz"), (":scheme", "http"),
                   (":authority", "x")] + [("x-a", "v" * 450)] * repeats
        connection.send_headers(1, headers, end_stream=True)
        started = time.monotonic()
        try:
            sock.sendall(connection.data_to_send())
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = answer_of(sock, timeout=15)
        return answer, time.monotonic() - started


def test_an_h2c_header_flood_is_refused_at_once_and_delays_nothing(
        settings: Settings, clean_db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """30,000 same-name headers over h2c froze the only process for 88 s. HTTP/2 is not
    served (no provider delivers over it): the connection is refused at once, and signed
    deliveries to the same process get 200 within 2 s meanwhile."""
    with web(settings, tmp_path / "web.log", workers=1) as (base, port):
        done: list[tuple[bytes, float]] = []
        flood = threading.Thread(target=lambda: done.append(h2_header_flood(port, 30_000)))
        flood.start()
        time.sleep(0.2)
        for n in range(4):
            delivered_fast(base, f"evt_beside_h2_{n}")
        flood.join(20)
        answer, took = done[0]
        assert took < 2.0, f"the h2c request held its connection {took:.1f} s"
        assert b":status" not in answer and not answer.startswith(b"\x00")  # no HTTP/2 frame
        delivered_fast(base, "evt_after_h2")


def test_http1_header_count_and_bytes_are_bounded(settings: Settings, clean_db,  # type: ignore[no-untyped-def]
                                                  tmp_path: Path) -> None:
    """More header bytes than MAX_HEADER_BYTES, or more headers than MAX_HEADERS: 431,
    connection closed, on any path."""

    with web(settings, tmp_path / "web.log", workers=1) as (base, port):
        big = "v" * (rsgi.MAX_HEADER_BYTES + 1)
        answer = raw_request(port, f"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 431"), answer[:100]
        many = "".join(f"X-{n}: v\r\n" for n in range(rsgi.MAX_HEADERS + 1))
        answer = raw_request(port, f"GET /healthz HTTP/1.1\r\nHost: x\r\n{many}\r\n")
        assert answer.startswith(b"HTTP/1.1 431"), answer[:100]
        assert requests.get(f"{base}/healthz", timeout=5).status_code == 200


# 7. Bodies held at once

BIG_BODY = 786_432  # 768 KiB: a large body (over front.SMALL_BODY)


def stalled_body(port: int, length: int) -> socket.socket:
    """Headers announcing `length` bytes and the first KiB of them, then nothing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    sock.sendall(f"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 f"\r\nStripe-Signature: t=1,v1=00\r\nContent-Length: {length}\r\n\r\n".encode()
                 + b"{" * 1024)
    return sock


def test_the_body_budget_holds_and_a_small_delivery_still_passes(
        settings: Settings, clean_db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With WEB_BODY_BUDGET_BYTES of 4 MiB, twelve 768 KiB bodies at once: the first four
    (3 MiB, what large bodies may take: all but the eighth kept for small ones) are read,
    the eight beyond wait briefly, then get 503 with Retry-After, unread. A signed small
    delivery still gets its 200 within 2 s."""
    env = {"MAX_BODY_BYTES": str(1 << 20), "WEB_BODY_BUDGET_BYTES": str(4 << 20)}
    with web(settings, tmp_path / "web.log", workers=1, **env) as (base, port):
        socks = [stalled_body(port, BIG_BODY) for _ in range(12)]
        try:
            time.sleep(0.3)
            delivered_fast(base, "evt_beside_budget")
            answers: list[bytes] = [b""] * len(socks)

            def read(index: int) -> None:
                answers[index] = answer_of(socks[index], timeout=14)

            readers = [threading.Thread(target=read, args=(n,)) for n in range(len(socks))]
            started = time.monotonic()
            for reader in readers:
                reader.start()
            for reader in readers:  # the 503s come after BUDGET_WAIT_SECONDS, 1 s
                reader.join(max(0.0, started + 4 - time.monotonic()))
            early = [answer for answer in answers if answer]
            assert len(early) == 8, [answer[:40] for answer in answers]
            for answer in early:
                head = answer.split(b"\r\n\r\n")[0].lower()
                assert head.startswith(b"http/1.1 503"), answer[:200]
                assert b"retry-after:" in head
            delivered_fast(base, "evt_beside_budget_2")
            for reader in readers:
                reader.join(15)
            late = [answer for answer in answers if answer not in early]
            assert len(late) == 4 and all(a.startswith(b"HTTP/1.1 408") for a in late), late
        finally:
            for sock in socks:
                sock.close()
        scrape = requests.get(f"{base}/metrics", timeout=5).text
        assert 'provider="stripe",reason="busy",source="stripe"} 8.0' in scrape


def test_a_budget_that_cannot_hold_two_largest_bodies_stops_web(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "webhooks", "web"], cwd=processes.ROOT, capture_output=True,
        text=True, timeout=30,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": "postgresql://u@127.0.0.1:1/db",
             "BROKER_URL": "redis://127.0.0.1:1/0", "MAX_BODY_BYTES": str(4 << 20),
             "WEB_BODY_BUDGET_BYTES": str(6 << 20)})
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("webhooks: WEB_BODY_BUDGET_BYTES: "), lines
