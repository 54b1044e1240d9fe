"""`python -m benchmarks.tracing [--rounds 3] [--seconds 10] [--connections 16]`: the
ingest with tracing off and on (OTEL_EXPORTER_OTLP_ENDPOINT set, every request sampled,
exported to an OTLP/HTTP receiver on loopback that only counts what it gets), in
alternating rounds on one database, so that the machine's drift falls on both.

Prints acked/s, p99 and the web's CPU per acknowledgement for each round, and the ratio
on ÷ off of the medians. Saves to results/history/DATE-COMMIT-tracing.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import load, report, stack
from tests.fakes.otlp_collector import OtlpCollector

RESULTS = Path(__file__).resolve().parent / "results"


def one_round(target: stack.Target, connections: int, seconds: float,
              extra_env: dict[str, str]) -> dict[str, Any]:
    stack.reset(target)
    with stack.web(target, extra_env=extra_env) as (base, web):
        load.closed_loop(base, connections, 2, stack.STRIPE_SECRET)  # warm up
        cpu_before = web.cpu_seconds()
        result = load.closed_loop(base, connections, seconds, stack.STRIPE_SECRET)
        cpu_ms = (web.cpu_seconds() - cpu_before) * 1000 / max(result.ok, 1)
    return {"rps": round(result.rps, 1), "p50_ms": round(result.p50_ms, 2),
            "p99_ms": round(result.p99_ms, 2), "errors": result.errors,
            "web_cpu_ms_per_ack": round(cpu_ms, 3), "load_average": stack.load_average()}


def run(target: stack.Target, rounds: int, connections: int, seconds: float) -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    with OtlpCollector(decode=False) as collector:
        traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
                  "OTEL_TRACES_SAMPLER": "always_on"}
        for index in range(rounds):
            for mode in ("off", "on") if index % 2 == 0 else ("on", "off"):
                row = one_round(target, connections, seconds, traced if mode == "on" else {})
                rows[mode].append(row)
                print(f"  {mode:>3}: {row['rps']:8.1f} acked/s  p99 {row['p99_ms']:6.2f} ms  "
                      f"web CPU {row['web_cpu_ms_per_ack']:.3f} ms/ack  "
                      f"(load {row['load_average']})", flush=True)
        requests, size = collector.exports
    off = statistics.median(row["rps"] for row in rows["off"])
    on = statistics.median(row["rps"] for row in rows["on"])
    summary = {
        "off_rps_median": off, "on_rps_median": on,
        "ratio_on_to_off": round(on / off, 3) if off else None,
        "off_p99_ms_median": statistics.median(row["p99_ms"] for row in rows["off"]),
        "on_p99_ms_median": statistics.median(row["p99_ms"] for row in rows["on"]),
        "export_requests": requests, "export_bytes": size,
    }
    return {"rounds": rows, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tracing", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, default=16)
    stack.add_server_options(parser, broker_db=9)
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="webhooks-bench-tracing-"))
    name = "webhooks_bench_tracing"
    target = stack.prepare(args.admin_url, name, args.broker_url, logs)
    print(f"ingest, tracing off and on: {args.rounds} rounds of {args.seconds:g} s at "
          f"{args.connections} connections; load average {stack.load_average()}; "
          f"logs in {logs}", flush=True)
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "commit": report.code_commit(stack.ROOT),
        "command": " ".join(["python", "-m", "benchmarks.tracing", *(argv or sys.argv[1:])]),
        "cores": os.cpu_count(), "connections": args.connections,
        "tracing": run(target, args.rounds, args.connections, args.seconds)}
    stack.drop(args.admin_url, name)
    summary = results["tracing"]["summary"]
    print(f"median acked/s off {summary['off_rps_median']}, on {summary['on_rps_median']}: "
          f"on ÷ off {summary['ratio_on_to_off']}; p99 off {summary['off_p99_ms_median']} ms, "
          f"on {summary['on_p99_ms_median']} ms; {summary['export_requests']} export requests, "
          f"{summary['export_bytes']} bytes")
    written = report.save_to_history(results, RESULTS, "tracing")
    print(f"wrote {', '.join(str(path) for path in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
