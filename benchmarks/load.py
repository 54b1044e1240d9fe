"""Load generators, latency measured client-side.

- closed loop at C connections: wrk (Debian's `wrk`, C, one event loop per thread) when it
  is installed, else Python processes with one keep-alive http.client connection per thread;
- open loop at a fixed rate (the end-to-end scenario): one thread with non-blocking sockets
  sending on a schedule, latency counted from the scheduled time so a slow server is not
  hidden by a slow client.
"""

from __future__ import annotations

import collections
import http.client
import itertools
import json
import multiprocessing
import os
import selectors
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.events import signed_delivery

HERE = Path(__file__).resolve().parent


@dataclass
class LoadResult:
    tool: str
    connections: int
    seconds: float
    ok: int  # 2xx answers: acknowledged deliveries
    errors: int  # other answers and socket errors
    p50_ms: float
    p99_ms: float
    latencies_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def rps(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {"tool": self.tool, "connections": self.connections, "rps": round(self.rps, 1),
                "p50_ms": round(self.p50_ms, 2), "p99_ms": round(self.p99_ms, 2),
                "ok": self.ok, "errors": self.errors, "seconds": round(self.seconds, 2)}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def closed_loop(base: str, connections: int, seconds: float, secret: str,
                prefer_wrk: bool = True) -> LoadResult:
    if prefer_wrk and shutil.which("wrk"):
        return _wrk(base, connections, seconds, secret)
    return _python_closed_loop(base, connections, seconds, secret)


# --- wrk ------------------------------------------------------------------------------

WRK_MAX_RPS = 15_000  # requests written per run, per second of it: more than it can send


def _wrk(base: str, connections: int, seconds: float, secret: str) -> LoadResult:
    threads = min(2, connections)
    run = uuid.uuid4().hex[:10]
    per_thread = int(WRK_MAX_RPS * seconds / threads) + 1000
    with tempfile.TemporaryDirectory(prefix="wrk-") as folder:
        prefix = f"{folder}/requests_"
        for thread in range(threads):
            with open(f"{prefix}{thread}.txt", "w") as lines:
                for n in range(per_thread):
                    _, body, headers = signed_delivery(f"{run}{thread}", n, secret)
                    lines.write(f"{headers['Stripe-Signature']}\t{body.decode()}\n")
        out = subprocess.run(
            ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
             "--timeout", "10s", "-s", str(HERE / "wrk_ingest.lua"), base, "--", prefix],
            capture_output=True, text=True, timeout=seconds + 60, check=True,
        ).stdout
    line = next(text for text in out.splitlines() if text.startswith("{"))
    data = json.loads(line)
    if data["requests"] > per_thread * threads:
        raise RuntimeError("wrk sent more requests than it had unique events for")
    errors = data["status_errors"] + data["socket_errors"]
    return LoadResult("wrk", connections, data["duration_us"] / 1e6,
                      data["requests"] - data["status_errors"], errors,
                      data["p50_us"] / 1000, data["p99_us"] / 1000)


# --- Python closed loop ---------------------------------------------------------------


def _python_closed_loop(base: str, connections: int, seconds: float,
                        secret: str) -> LoadResult:
    processes = min(connections, max(os.cpu_count() or 1, 2))
    shares = [connections // processes + (i < connections % processes) for i in range(processes)]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    start_at = time.time() + 0.5
    run = uuid.uuid4().hex[:10]
    children = [context.Process(target=_closed_process,
                                args=(queue, base, share, start_at, seconds, secret, f"{run}{i}"))
                for i, share in enumerate(shares)]
    for child in children:
        child.start()
    latencies: list[float] = []
    ok = errors = 0
    for _ in children:
        part_latencies, part_ok, part_errors = queue.get(timeout=seconds + 60)
        latencies += part_latencies
        ok += part_ok
        errors += part_errors
    for child in children:
        child.join()
    return LoadResult("python", connections, seconds, ok, errors,
                      percentile(latencies, 50), percentile(latencies, 99), latencies)


def _closed_process(queue: Any, base: str, threads: int, start_at: float, seconds: float,
                    secret: str, prefix: str) -> None:
    results: list[tuple[list[float], int, int]] = []
    workers = [threading.Thread(target=_closed_thread,
                                args=(results, base, start_at, seconds, secret, f"{prefix}_{t}"))
               for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    queue.put(([x for r in results for x in r[0]], sum(r[1] for r in results),
               sum(r[2] for r in results)))


def _closed_thread(results: list[tuple[list[float], int, int]], base: str, start_at: float,
                   seconds: float, secret: str, prefix: str) -> None:
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    latencies: list[float] = []
    ok = errors = 0
    time.sleep(max(0.0, start_at - time.time()))
    end = start_at + seconds
    for n in itertools.count():
        if time.time() >= end:
            break
        _, body, headers = signed_delivery(prefix, n, secret)
        started = time.perf_counter()
        status = _post(connection, "/webhooks/stripe", body, headers)
        if 200 <= status < 300:
            latencies.append((time.perf_counter() - started) * 1000)
            ok += 1
        else:
            errors += 1
    connection.close()
    results.append((latencies, ok, errors))


def _post(connection: http.client.HTTPConnection, path: str, body: bytes,
          headers: dict[str, str]) -> int:
    try:
        connection.request("POST", path, body, headers)
        response = connection.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        connection.close()  # reconnects on the next request
        return 0


# --- open loop at a fixed rate ----------------------------------------------------------


@dataclass
class Sent:
    event_id: str
    acked_at: float  # time.time() when the 2xx arrived
    latency_ms: float  # from its scheduled send time


def open_loop(base: str, rate: float, seconds: float, secret: str,
              connections: int = 32) -> tuple[list[Sent], int]:
    """Deliver `rate` events/s for `seconds` in a child process; (acked, errors)."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_open_process,
                            args=(queue, base, rate, seconds, secret, connections))
    child.start()
    sent, errors = queue.get(timeout=seconds + 120)
    child.join()
    return [Sent(*row) for row in sent], errors


def _open_process(queue: Any, base: str, rate: float, seconds: float, secret: str,
                  connections: int) -> None:
    run = uuid.uuid4().hex[:10]
    parts = urlsplit(base)
    address = (parts.hostname or "127.0.0.1", parts.port or 80)
    # Requests are built and signed before the clock starts: the generator shares the cores
    # with what it measures.
    requests = [_request_bytes(address, *signed_delivery(run, n, secret))
                for n in range(int(rate * seconds))]
    generator = _OpenLoop(address, requests, rate, connections)
    generator.run(time.time() + 0.2)
    queue.put((generator.sent, generator.errors))


def _request_bytes(address: tuple[str, int], event_id: str, body: bytes,
                   headers: dict[str, str]) -> tuple[str, bytes]:
    head = ["POST /webhooks/stripe HTTP/1.1", f"Host: {address[0]}:{address[1]}",
            f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
    return event_id, ("\r\n".join(head) + "\r\n\r\n").encode() + body


class _OpenLoop:
    """One thread, non-blocking keep-alive sockets and epoll: each request is sent at its
    scheduled time on the idle connection that has waited longest, as from many senders
    (all `connections` are opened first, and spread over the server's processes; when all
    are busy a request waits, and the wait counts in its latency). Python threads with
    http.client cost 0.3 ms of CPU per request on the cores being measured; this, a tenth
    of that."""

    def __init__(self, address: tuple[str, int], requests: list[tuple[str, bytes]],
                 rate: float, connections: int) -> None:
        self.address, self.requests, self.rate = address, requests, rate
        self.max_connections = connections
        self.selector = selectors.DefaultSelector()
        self.idle: collections.deque[socket.socket] = collections.deque()
        self.busy: dict[socket.socket, _InFlight] = {}
        self.sent: list[tuple[str, float, float]] = []
        self.errors = 0

    def run(self, start_at: float) -> None:
        for _ in range(self.max_connections):
            self._connect()
        total, next_n = len(self.requests), 0
        deadline = start_at + total / self.rate + 30
        while (next_n < total or self.busy) and time.time() < deadline:
            now, blocked = time.time(), False
            while next_n < total and start_at + next_n / self.rate <= now:
                if not self._send(next_n, start_at + next_n / self.rate):
                    blocked = True  # every connection is busy: sent when one is free
                    break
                next_n += 1
            wait = 0.05 if blocked or next_n >= total else start_at + next_n / self.rate - now
            for key, _ in self.selector.select(timeout=max(0.0, min(wait, 0.05))):
                self._receive(key.fileobj)  # type: ignore[arg-type]
        self.errors += total - next_n + len(self.busy)
        for connection in [*self.idle, *self.busy]:
            connection.close()

    def _send(self, n: int, due: float) -> bool:
        if not self.idle:
            return False
        connection = self.idle.popleft()
        event_id, data = self.requests[n]
        try:
            connection.sendall(data)  # a few KB: fits the socket buffer of an idle connection
        except OSError:
            self._replace(connection)
            self.errors += 1
            return True
        self.busy[connection] = _InFlight(event_id, due)
        self.selector.register(connection, selectors.EVENT_READ)
        return True

    def _receive(self, connection: socket.socket) -> None:
        flight = self.busy[connection]
        try:
            chunk = connection.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(connection)
            return
        flight.buffer += chunk
        status = flight.complete()
        if status is None:
            return
        now = time.time()
        self.selector.unregister(connection)
        del self.busy[connection]
        if 200 <= status < 300:
            self.sent.append((flight.event_id, now, (now - flight.due) * 1000))
        else:
            self.errors += 1
        if flight.close:
            self._replace(connection)
        else:
            self.idle.append(connection)

    def _drop(self, connection: socket.socket) -> None:
        self.selector.unregister(connection)
        del self.busy[connection]
        self._replace(connection)
        self.errors += 1

    def _connect(self) -> None:
        connection = socket.create_connection(self.address, timeout=10)
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection.setblocking(False)
        self.idle.append(connection)

    def _replace(self, connection: socket.socket) -> None:
        connection.close()
        try:
            self._connect()
        except OSError:
            self.errors += 1  # the pool is one connection short


@dataclass
class _InFlight:
    event_id: str
    due: float
    buffer: bytes = b""
    close: bool = False

    def complete(self) -> int | None:
        """The response's status once it has all arrived, else None."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = self.buffer[:end].decode("latin-1").lower().split("\r\n")
        fields = dict(line.split(":", 1) for line in head[1:] if ":" in line)
        length = int(fields.get("content-length", "0").strip() or 0)
        if len(self.buffer) < end + 4 + length:
            return None
        self.close = fields.get("connection", "").strip() == "close"
        return int(head[0].split()[1])


def describe(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "mean_ms": float("nan")}
    return {"p50_ms": round(percentile(values, 50), 2), "p99_ms": round(percentile(values, 99), 2),
            "mean_ms": round(statistics.fmean(values), 2)}
