"""`python -m benchmarks.sources [--requests 2000]`: the web's CPU per acknowledged Stripe
delivery through the Flask app with one source configured and with twenty (the default
source and nineteen named ones), in one process against the benchmark's own database
(real Postgres, real Redis). The route finds a delivery's source in a dict built once,
so the number of sources should not show; the deliveries of the twenty-source run go to
the last named source. A third run, alternated with the two, posts thin events to a thin
destination among the twenty, which the `stripe` library's thin-event parser verifies
(shared/providers/stripe.py): what that parse adds per delivery.

Saves to results/history/DATE-COMMIT-sources.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import report, stack
from benchmarks.events import signed_delivery
from benchmarks.ingest_profile import _cpu_ms, _wsgi_call

NAMED = 19
THIN = f"s{NAMED - 2}"  # the thin destination among the named sources


def _environ(path: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    from werkzeug.test import EnvironBuilder

    return EnvironBuilder(path=path, method="POST", data=body, headers=list(headers.items()),
                          content_type="application/json").get_environ()


def _named_env() -> dict[str, str]:
    names = [f"s{n}" for n in range(NAMED)]
    env = {"STRIPE_SOURCES": ",".join(names)}
    env.update({f"STRIPE_{name.upper()}_WEBHOOK_SECRET": f"{stack.STRIPE_SECRET}_{name}"
                for name in names})
    env.update({f"STRIPE_{THIN.upper()}_EVENTS": "thin",
                f"STRIPE_{THIN.upper()}_API_KEY": "sk_test_benchmark_thin"})
    return env


def _run(env: dict[str, str], path: str, secret: str, run: str, requests: int,
         thin: bool = False) -> float:
    from webhooks.ingest.app import create_app
    from webhooks.shared.settings import Settings

    app = create_app(Settings.from_env({**os.environ, **env}))
    calls = [_wsgi_call(app, _environ(path, body, headers))
             for _, body, headers in (signed_delivery(run, n, secret, thin)
                                      for n in range(requests))]
    return _cpu_ms(calls)


def measure(requests: int, rounds: int) -> dict[str, list[float]]:
    from webhooks.shared.logs import configure_logging
    from webhooks.shared.settings import Settings

    configure_logging(Settings.from_env())
    stream = open(os.devnull, "w")
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(stream)
    last = f"s{NAMED - 1}"
    found: dict[str, list[float]] = {"1 source": [], "20 sources": [], "20, thin": []}
    for turn in range(rounds):  # alternated, so that the machine's load hits both alike
        found["1 source"].append(round(_run(
            {}, "/webhooks/stripe", stack.STRIPE_SECRET, f"one{turn}", requests), 4))
        found["20 sources"].append(round(_run(
            _named_env(), f"/webhooks/stripe/{last}", f"{stack.STRIPE_SECRET}_{last}",
            f"twenty{turn}", requests), 4))
        found["20, thin"].append(round(_run(
            _named_env(), f"/webhooks/stripe/{THIN}", f"{stack.STRIPE_SECRET}_{THIN}",
            f"thin{turn}", requests, thin=True), 4))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sources", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    stack.add_server_options(parser, broker_db=9)
    args = parser.parse_args(argv)
    name = "webhooks_bench_sources"
    stack.prepare(args.admin_url, name, args.broker_url,
                  Path(tempfile.mkdtemp(prefix="webhooks-bench-sources-")))
    try:
        found = measure(args.requests, args.rounds)
    finally:
        stack.drop(args.admin_url, name)
    for label, values in found.items():
        print(f"  {label:12} ms per delivery: {', '.join(f'{v:.3f}' for v in values)}")
    report.save_tool_run("sources", argv, "sources", {"load_average": stack.load_average(),
                                                      "ms_per_delivery": found})
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
