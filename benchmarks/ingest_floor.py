"""`python -m benchmarks.ingest_floor [--rounds 2] [--seconds 8]`: the floor of a Python
ingest under granian on this machine, beside `webhooks web`.

A bare RSGI app (`app` below, served by granian as `webhooks web` is: 2 processes, RSGI,
uvloop) that does only what no ingest can skip: read the body, verify the Stripe signature
with the product's own check (shared/providers/stripe.py), run the ingest's one statement
(queries.EventJobInsert) and answer 200 with the job's id. No allowlist, no metrics, no
wake-up, no log, no deadline, no error handling. Two ways to reach Postgres: `thread` (a
pool of 4 threads with a connection each, as the front hands a delivery to the app's
threads) and `async` (psycopg's AsyncConnectionPool on the event loop: no thread hop).
Each takes the ingest scenario's load (wrk or the Python generator, 16 connections, signed
unique Stripe invoice events), alternated with `webhooks web` over `--rounds`; per run:
acknowledgements a second, p99, and the server's CPU per acknowledgement.

What it answers: how much of the web's CPU per delivery is the product's own work, and
how much any Python handler behind granian pays. Saves to
results/history/DATE-COMMIT-ingest-floor.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests

from benchmarks import report, scenarios, stack

MODES = ("thread", "async")
THREADS = 4  # as `webhooks web`'s WEB_THREADS


class Floor:
    """The bare ingest (module docstring), in the mode $FLOOR_MODE, against $FLOOR_URL."""

    def __init__(self) -> None:
        from webhooks.shared import providers, queries
        from webhooks.shared.sources import Source

        self.url = os.environ["FLOOR_URL"]
        self.mode = os.environ["FLOOR_MODE"]
        self.source = Source("stripe", "stripe", (os.environ["STRIPE_WEBHOOK_SECRET"],))
        self.verify = providers.PROVIDERS["stripe"].verify
        # SQLAlchemy's :name parameters as psycopg's %(name)s (not the `::` casts)
        self.sql = re.sub(r"(?<!:):(\w+)", r"%(\1)s", str(queries.EventJobInsert.text))
        self.pool = ThreadPoolExecutor(THREADS)
        self.local = threading.local()
        self.async_pool: Any = None

    def _params(self, headers: Any, body: bytes) -> dict[str, Any]:
        delivery = self.verify(body, headers, self.source, 300, time.time())
        return {"provider": "stripe", "source": "stripe", "event_id": delivery.event_id,
                "event_type": delivery.event_type, "body_sha256": None,
                "payload": body.decode(), "received_via": "delivery", "trace_context": None,
                "account": None, "livemode": None}

    def _insert(self, headers: Any, body: bytes) -> Any:
        import psycopg

        connection = getattr(self.local, "connection", None)
        if connection is None:
            connection = self.local.connection = psycopg.connect(self.url, autocommit=True)
        return connection.execute(self.sql, self._params(headers, body)).fetchone()

    async def _insert_async(self, headers: Any, body: bytes) -> Any:
        if self.async_pool is None:
            import psycopg_pool

            pool = psycopg_pool.AsyncConnectionPool(
                self.url, min_size=THREADS, max_size=THREADS,
                kwargs={"autocommit": True}, open=False)
            await pool.open()
            self.async_pool = pool
        params = self._params(headers, body)
        async with self.async_pool.connection() as connection:
            cursor = await connection.execute(self.sql, params)
            return await cursor.fetchone()

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        from werkzeug.datastructures import Headers

        if scope.proto != "http":
            return
        body = await protocol()
        headers = Headers(list(scope.headers.items()))
        if self.mode == "thread":
            row = await asyncio.get_running_loop().run_in_executor(
                self.pool, self._insert, headers, body)
        else:
            row = await self._insert_async(headers, body)
        protocol.response_bytes(200, [("content-type", "application/json")],
                                json.dumps({"job_id": row[0]}).encode())


def app() -> Floor:
    """granian's factory (`benchmarks.ingest_floor:app`)."""
    return Floor()


def _floor_run(target: stack.Target, plan: scenarios.Plan, mode: str) -> dict[str, Any]:
    stack.reset(target)
    port = stack.free_port()
    url = target.database_url.replace("postgresql+psycopg://", "postgresql://")
    command = [sys.executable, "-m", "granian", "--interface", "rsgi", "--factory",
               "--workers", "2", "--loop", "uvloop", "--host", "127.0.0.1",
               "--port", str(port), "benchmarks.ingest_floor:app"]
    server = stack.start(f"floor-{mode}", [], target, {
        "FLOOR_MODE": mode, "FLOOR_URL": url, "STRIPE_WEBHOOK_SECRET": stack.STRIPE_SECRET,
        "PYTHONPATH": str(stack.ROOT)}, command=command)
    popen = server.popen
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while not _answers(base):
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the floor app did not start: {target.logs}")
            time.sleep(0.2)
        figures = scenarios.closed_loop_run(base, server, plan)
    finally:
        stack.stop(server)
    figures.pop("acked_with_warmup")
    stack.reset(target)
    return figures


def _answers(base: str) -> bool:
    try:
        requests.get(base, timeout=1)
    except requests.RequestException:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ingest_floor",
                                     description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8)
    stack.add_server_options(parser, broker_db=9)
    args = parser.parse_args(argv)
    name = "webhooks_bench_floor"
    target = stack.prepare(args.admin_url, name, args.broker_url,
                           Path(tempfile.mkdtemp(prefix="webhooks-bench-floor-")))
    plan = replace(scenarios.Plan(), ingest_seconds=args.seconds)
    runs: list[dict[str, Any]] = []
    try:
        for number in range(1, args.rounds + 1):
            for server in ("webhooks web", *MODES):
                figures = (scenarios.ingest_run(target, plan, f"web-floor-{number}")
                           if server == "webhooks web" else _floor_run(target, plan, server))
                runs.append({"server": server, "round": number, **figures})
                print(f"  {server:13} {figures['rps']:8.1f} acked/s  p99 "
                      f"{figures['p99_ms']:6.2f} ms  CPU {figures['web_cpu_ms_per_ack']:.3f} "
                      f"ms/ack  (load {stack.load_average()})", flush=True)
    finally:
        stack.drop(args.admin_url, name)
    report.save_tool_run("ingest_floor", argv, "ingest-floor", {"runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
