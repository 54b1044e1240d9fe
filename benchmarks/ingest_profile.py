"""`python -m benchmarks.ingest_profile [--requests 3000]`: where the web's CPU per
acknowledged delivery goes, stage by stage, in one process against the benchmark's own
database (real Postgres, real Redis).

The ingest scenario's ratio to pgbench is bound by the web's CPU: on a machine where web,
Postgres and the load share the cores, every millisecond of Python per delivery is a
millisecond Postgres does not get. This measures each stage of a delivery alone, with
`time.process_time` (CPU of this process, all threads; time waiting on Postgres is not
counted), beside the whole request through the WSGI app:

- the whole delivery on the front's path: `ingest.webhooks.answer` with the headers and
  body the RSGI front hands it (`webhooks web` serves every delivery so, tracing off)
- the whole request through the Flask app as `webhooks web` builds it (environ prepared
  in advance, as the server would hand it over): the route, a thin adapter over the same
  function, which serves deliveries while tracing is on and in the tests' client
- Flask's floor: a one-route Flask app that reads the body and answers the same JSON
- the signature check (shared/providers/stripe.py with the stripe library's scheme)
- recording: the one statement through psycopg (shared/recording.py), client side only
- the log line (DEBUG: off at the default LOG_LEVEL) and the metrics of one delivery
- the wake-up (the waker thread's share per delivery, Redis included on our side)
- what is left: the front's whole less the stages (the decision's own code, the pool's
  checkout and checkin, the garbage collector)

Prints ms per delivery for each and its share of the whole. Saves to
results/history/DATE-COMMIT-ingest-profile.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from werkzeug.datastructures import EnvironHeaders

from benchmarks import report, stack
from benchmarks.events import signed_delivery

FRONT = "whole delivery (the front's path, answer)"
FLASK = "whole request (Flask app)"


def _cpu_ms(calls: list[Callable[[], Any]]) -> float:
    for call in calls[: len(calls) // 10]:  # warm up (prepared statements, caches)
        call()
    measured = calls[len(calls) // 10:]
    started = time.process_time()
    for call in measured:
        call()
    return (time.process_time() - started) * 1000 / len(measured)


def _environ(body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    from werkzeug.test import EnvironBuilder

    builder = EnvironBuilder(path="/webhooks/stripe", method="POST", data=body,
                             headers=list(headers.items()), content_type="application/json")
    return builder.get_environ()


def _wsgi_call(app: Any, environ: dict[str, Any]) -> Callable[[], None]:
    def call() -> None:
        statuses: list[str] = []
        for _ in app(environ, lambda status, headers, exc_info=None: statuses.append(status)):
            pass
        if not statuses or not statuses[0].startswith("200"):
            raise RuntimeError(f"the app answered {statuses}")
    return call


def _deliveries(run: str, count: int) -> list[tuple[str, bytes, dict[str, str]]]:
    return [signed_delivery(run, n, stack.STRIPE_SECRET) for n in range(count)]


def _flask_floor() -> Any:
    from flask import Flask, jsonify, request

    floor = Flask("floor")

    @floor.post("/webhooks/<provider>")
    def receive(provider: str) -> Any:
        request.environ["wsgi.input"].read(request.content_length)
        return jsonify({"event_id": "evt", "duplicate": False, "status": "pending"})

    return floor


def measure(requests: int) -> dict[str, float]:
    from webhooks.ingest import webhooks
    from webhooks.ingest.app import create_app
    from webhooks.shared import metrics, providers
    from webhooks.shared.logs import configure_logging
    from webhooks.shared.recording import record_event
    from webhooks.shared.settings import Settings

    settings = Settings.from_env()
    configure_logging(settings)
    stream = open(os.devnull, "w")  # the log's destination for the run
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(stream)
    app = create_app(settings)
    engine = app.extensions["engine"]
    stripe = providers.get("stripe")
    assert stripe is not None
    source = app.extensions["sources"].get("stripe")
    assert source is not None
    stages: dict[str, float] = {}

    def answer(body: bytes, headers: dict[str, str]) -> Callable[[], None]:
        environ = _environ(body, headers)
        address = app.extensions["client_address"](environ)
        front_headers = EnvironHeaders(environ)

        def call() -> None:
            answered = webhooks.answer(app, "stripe", None, address, front_headers, body)
            if answered.status != 200:
                raise RuntimeError(f"answered {answered.status}: {answered.body!r}")
        return call

    stages[FRONT] = _cpu_ms(
        [answer(body, headers) for _, body, headers in _deliveries("front", requests)])

    whole = [_wsgi_call(app, _environ(body, headers))
             for _, body, headers in _deliveries("whole", requests)]
    stages[FLASK] = _cpu_ms(whole)

    floor = _flask_floor()
    stages["Flask floor (one route, same answer)"] = _cpu_ms(
        [_wsgi_call(floor, _environ(body, headers))
         for _, body, headers in _deliveries("floor", requests)])

    def check(body: bytes, headers: dict[str, str]) -> Callable[[], Any]:
        return lambda: stripe.verify(body, headers, source, settings.tolerance_seconds,
                                     time.time())

    stages["signature check"] = _cpu_ms(
        [check(body, headers) for _, body, headers in _deliveries("verify", requests)])

    def record(event_id: str, body: bytes) -> Callable[[], Any]:
        return lambda: record_event(engine, "stripe", event_id, "invoice.paid", body)

    stages["recording (psycopg, client side)"] = _cpu_ms(
        [record(event_id, body) for event_id, body, _ in _deliveries("record", requests)])

    log = logging.getLogger(webhooks.__name__)

    def line(n: int) -> Callable[[], None]:
        def call() -> None:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("event recorded", extra={
                    "provider": "stripe", "event_id": f"evt_{n}", "job_id": n,
                    "event_type": "invoice.paid"})
        return call

    stages["log line (DEBUG)"] = _cpu_ms([line(n) for n in range(requests)])

    def count() -> None:
        metrics.signature_verified.labels("stripe", "stripe", "1").inc()
        metrics.deliveries_received.labels("stripe", "stripe").inc()
        metrics.ack_latency.labels("stripe").observe(0.004)

    stages["metrics"] = _cpu_ms([count] * requests)

    waker = app.extensions["waker"]
    started = time.process_time()
    for n in range(requests):
        waker.wake(n + 1)
        if n % 8 == 0:
            time.sleep(0.001)  # a stream of deliveries, not one burst
    waker.close(timeout=10)
    stages["wake-up (waker thread)"] = (time.process_time() - started) * 1000 / requests
    stream.close()
    parts = sum(value for name, value in stages.items()
                if name not in (FRONT, FLASK) and not name.startswith("Flask"))
    stages["unattributed (the front's whole less the stages)"] = stages[FRONT] - parts
    return {name: round(value, 4) for name, value in stages.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ingest_profile",
                                     description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    stack.add_server_options(parser, broker_db=9)
    args = parser.parse_args(argv)
    name = "webhooks_bench_profile"
    logs = Path(tempfile.mkdtemp(prefix="webhooks-bench-profile-"))
    stack.prepare(args.admin_url, name, args.broker_url, logs)
    try:
        stages = measure(args.requests)
    finally:
        stack.drop(args.admin_url, name)
    whole = stages[FRONT]
    print(f"web CPU per delivery, {args.requests} deliveries per stage "
          f"(load average {stack.load_average()}):")
    for stage, value in stages.items():
        print(f"  {stage:40} {value:7.3f} ms  {100 * value / whole:5.1f}%")
    report.save_tool_run("ingest_profile", argv, "ingest-profile", {"ms_per_delivery": stages})
    print(json.dumps(stages))
    return 0


if __name__ == "__main__":
    sys.exit(main())
