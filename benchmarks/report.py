"""Printing, saving (JSON, CSV) and charting the results."""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def print_scenario(name: str, result: Any, targets: Mapping[str, float]) -> None:
    printers: dict[str, Callable[[Any, Mapping[str, float]], None]] = {
        "ingest": _print_ingest, "worker": _print_worker, "e2e": _print_e2e,
        "sweep": _print_sweep, "servers": lambda result, targets: None}
    printers[name](result, targets)
    sys.stdout.flush()


def _print_ingest(result: dict[str, Any], targets: Mapping[str, float]) -> None:
    app, ref = result["app"], result["pgbench"]
    print(f"ingest  {app['connections']} connections, {app['seconds']} s, {app['tool']} "
          f"(load {result['load_average']})")
    print(f"  app      {app['rps']:9.1f} acked/s  p50 {app['p50_ms']:6.2f} ms  "
          f"p99 {app['p99_ms']:6.2f} ms  errors {app['errors']}  "
          f"rows {result['rows_recorded']}  web CPU {app['web_cpu_ms_per_ack']} ms/ack")
    if ref:
        print(f"  pgbench  {ref['tps']:9.1f} tx/s     p50 {ref['p50_ms']:6.2f} ms  "
              f"p99 {ref['p99_ms']:6.2f} ms  (ingest.sql, {ref['clients']} clients)")
        print(f"  ratio app/pgbench {result['ratio']}")
    print(f"  target: >= {targets['ingest_rps']} acked/s, p99 <= {targets['ingest_p99_ms']} ms")
    print(f"  idle web CPU {result['idle_cpu_percent']} % of a core")
    _print_memory(result["memory"])


def _print_worker(result: dict[str, Any], targets: Mapping[str, float]) -> None:
    app, ref = result["app"], result["pgbench"]
    print(f"worker  {app['jobs']} invoice jobs, concurrency {app['concurrency']}, "
          f"batch {app['batch']} (load {result['load_average']})")
    print(f"  app      {app['jobs_per_s']:9.1f} jobs/s  drained in {app['seconds']} s, "
          f"worker CPU {app['worker_cpu_ms_per_job']} ms/job "
          f"(emails all sent after {app['emails_sent_after_s']} s)")
    if ref:
        print(f"  pgbench  {ref['units_per_s']:9.1f} jobs/s  ({ref['tps']} tx/s of "
              f"{ref['jobs_per_transaction']} job(s), p99 {ref['p99_ms']} ms, worker.sql, "
              f"{ref['clients']} clients)")
        print(f"  ratio app/pgbench {result['ratio']}")
    print(f"  target: >= {targets['worker_jobs_per_s']} jobs/s")
    print(f"  idle worker CPU {result['idle_cpu_percent']} % of a core "
          f"(target < {targets['idle_cpu_percent']})")
    _print_memory(result["memory"])


def _print_e2e(result: dict[str, Any], targets: Mapping[str, float]) -> None:
    print("end to end: acknowledged -> applied (the job's done mark, jobs.finished_at)")
    for row in result["rates"].values():
        print(f"  {row['rate']:4d}/s  achieved {row['achieved_rate']}/s  "
              f"delay p50 {row['delay']['p50_ms']} ms p99 {row['delay']['p99_ms']} ms  "
              f"ack p50 {row['ack']['p50_ms']} ms p99 {row['ack']['p99_ms']} ms  "
              f"errors {row['errors']} not applied {row['not_applied']} "
              f"(load {row['load_average']})")
        print(f"         CPU per event: web {row['web_cpu_ms_per_event']} ms, "
              f"worker {row['worker_cpu_ms_per_event']} ms")
    print(f"  target: p99 <= {targets['e2e_p99_ms_at_500']} ms at 500/s")
    _print_memory(result["memory"])


def _print_sweep(rows: list[dict[str, Any]], targets: Mapping[str, float]) -> None:
    print("  conns      rps   p50 ms   p99 ms   pgbench tps  pgbench p99")
    for row in rows:
        print(f"  {row['connections']:5d} {row['rps']:8.1f} {row['p50_ms']:8.2f} "
              f"{row['p99_ms']:8.2f} {row.get('pgbench_tps', float('nan')):13.1f} "
              f"{row.get('pgbench_p99_ms', float('nan')):12.2f}")


def _print_memory(memory: list[dict[str, Any]]) -> None:
    parts = [f"{m['process']}/{m['role']} {m['peak_rss_mb']}" for m in memory]
    print(f"  peak RSS MB: {', '.join(parts)}")


def save(results: dict[str, Any], folder: Path, tag: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / f"{tag}.json"]
    written[0].write_text(json.dumps(results, indent=2) + "\n")
    for key in ("sweep", "servers"):
        if results.get(key):
            path = folder / f"{tag}-{key}.csv"
            _csv(results[key], path)
            written.append(path)
    if results.get("sweep"):
        chart = _chart(results["sweep"], folder / f"{tag}-ingest-concurrency.png")
        if chart:
            written.append(chart)
    return written


def _csv(rows: list[dict[str, Any]], path: Path) -> None:
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _chart(rows: list[dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no chart")
        return None
    connections = [row["connections"] for row in rows]
    figure, throughput = plt.subplots(figsize=(8, 4.5))
    throughput.plot(connections, [row["rps"] for row in rows], "o-", color="tab:blue",
                    label="webhooks web: acked/s")
    if all("pgbench_tps" in row for row in rows):
        throughput.plot(connections, [row["pgbench_tps"] for row in rows], "s--",
                        color="tab:gray", label="pgbench ingest.sql: tx/s")
    throughput.set_xscale("log", base=2)
    throughput.set_xticks(connections, [str(c) for c in connections])
    throughput.set_xlabel("concurrent connections")
    throughput.set_ylabel("throughput (per second)")
    latency = throughput.twinx()
    latency.plot(connections, [row["p99_ms"] for row in rows], "^-", color="tab:red",
                 label="webhooks web: p99 ms")
    latency.set_ylabel("p99 latency (ms)")
    handles = throughput.get_legend_handles_labels()
    more = latency.get_legend_handles_labels()
    throughput.legend(handles[0] + more[0], handles[1] + more[1], loc="upper left")
    throughput.set_title("Ingest throughput and p99 by concurrency "
                         f"(load average {rows[0].get('load_average', '?').split()[0]} "
                         f"on {os.cpu_count()} cores)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def server_candidates() -> dict[str, tuple[list[str], dict[str, str]]]:
    """Server command lines (with $PORT) and their environment, for `--only servers`."""
    import tempfile

    granian = str(Path(sys.executable).with_name("granian"))
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    metrics = {"PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix="bench-metrics-")}
    candidates: dict[str, tuple[list[str], dict[str, str]]] = {}
    for workers, threads in ((2, 1), (3, 1), (2, 4), (3, 4), (4, 2)):
        kind = "sync" if threads == 1 else "gthread"
        candidates[f"gunicorn {kind} w{workers}x{threads}"] = (
            [gunicorn, "--worker-class", kind, "--workers", str(workers), "--threads",
             str(threads), "--bind", "127.0.0.1:$PORT", "ingest.server:app()"], metrics)
    for workers, threads in ((1, 8), (2, 1), (2, 2), (2, 4), (2, 8), (3, 2), (3, 4), (4, 1),
                             (4, 4)):
        candidates[f"granian wsgi w{workers}x{threads}"] = (
            [granian, "--interface", "wsgi", "--factory", "--host", "127.0.0.1",
             "--port", "$PORT", "--workers", str(workers), "--blocking-threads", str(threads),
             "--no-ws", "--log-level", "warning", "ingest.server:app"], metrics)
    wanted = os.environ.get("BENCH_SERVERS")  # a regular expression, to run a few
    return {k: v for k, v in candidates.items() if not wanted or re.search(wanted, k)}
