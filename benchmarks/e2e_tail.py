"""`python -m benchmarks.e2e_tail [--runs 4] [--rate 500] [--warmup 1]`: where the end-to-end
delay's tail comes from, at a steady rate through `webhooks web` and one `webhooks worker`
group, on a database of its own.

For each run of 10 s it prints the delay's p99 (acknowledgement to the job's done mark,
as the e2e scenario measures it) and then, for the events over 100 ms: when they were
acknowledged (seconds from the run's start, a count per 0.1 s), the worker's batches
beside them (from its "batch committed" lines: how many, jobs per batch, their durations,
the longest), checkpoints and autovacuum runs during the run, and what the database's
active backends were waiting on, sampled every 20 ms, in the windows where slow events
were applied against the rest of the run, and where the CPU went in those windows against
the rest (`CpuSampler`, every 20 ms: the cores used by web's processes, the worker's, the
database's backends, Postgres's own processes and Redis; the machine's busy and iowait
cores; the worker's threads that ran): a stall with the machine's cores full is CPU
contention, one with them idle and the worker's threads not running is waiting (the disk,
a lock, a wake-up). Each run also counts the worker's claims that found jobs and those
that found none (`webhooks_job_claims_total` on the worker's /metrics): wake-ups spent
for nothing. `--warmup` sends that many seconds at the same rate before each run,
so the run does not begin after an idle pause. `--worker-args` starts the worker with
those options (e.g. `--threads 4`).

Saves to results/history/DATE-COMMIT-e2e-tail.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import requests
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from benchmarks import load, report, stack
from benchmarks.scaleout import Waits
from benchmarks.scenarios import wait_applied, wait_ready

SLOW_MS = 100.0
SAMPLE_SECONDS = 0.02
MAINTENANCE = sa.text("""
    SELECT (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter),
           (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)
            FROM pg_stat_user_tables)
""")


class WaitSampler:
    """The active backends' wait events of the engine's database (Waits.QUERY), every
    SAMPLE_SECONDS, in a thread: (time, rows) per sample."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.samples: list[tuple[float, list[tuple[str, int]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        with self.engine.connect() as conn:
            while not self._stop.is_set():
                rows = list(conn.execute(Waits.QUERY).tuples())
                conn.rollback()
                self.samples.append((time.time(), rows))
                time.sleep(SAMPLE_SECONDS)


class CpuSampler:
    """Every SAMPLE_SECONDS, in a thread: the CPU seconds so far of each kind of process
    (web, worker, and stack.server_cpu's Postgres and Redis kinds), the machine's busy and
    iowait seconds, and how many of the worker's threads ran since the previous sample.
    `cores(windows)` gives the mean cores per kind in a run's 0.1 s slots that are in
    `windows`, and elsewhere."""

    def __init__(self, target: stack.Target, web: stack.Process, worker: stack.Process) -> None:
        self.servers = stack.server_cpu(target)
        self.web, self.worker = web, worker
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._threads: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CpuSampler:
        self.servers.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _worker_threads_ran(self) -> float:
        ran = 0
        for proc in self.worker.tree():
            try:
                for thread in proc.threads():
                    spent = thread.user_time + thread.system_time
                    if spent > self._threads.get(thread.id, spent):
                        ran += 1
                    self._threads[thread.id] = spent
            except psutil.Error:
                continue
        return float(ran)

    def _run(self) -> None:
        while not self._stop.is_set():
            times = psutil.cpu_times()
            reading = {"web": self.web.cpu_seconds(), "worker": self.worker.cpu_seconds(),
                       **self.servers.seconds(), "machine_busy": stack.machine_busy_seconds(),
                       "machine_iowait": float(getattr(times, "iowait", 0.0)),
                       "worker_threads_ran": self._worker_threads_ran()}
            self.samples.append((time.time(), reading))
            time.sleep(SAMPLE_SECONDS)

    def cores(self, started: float, ended: float,
              windows: set[float]) -> dict[str, dict[str, float]]:
        """Mean cores per kind (threads for worker_threads_ran, per sample) between
        consecutive samples in the run, in `windows` (its 0.1 s slots) and elsewhere."""
        spent: dict[str, dict[str, float]] = {"slow_windows": {}, "elsewhere": {}}
        seconds = {"slow_windows": 0.0, "elsewhere": 0.0}
        counts = {"slow_windows": 0, "elsewhere": 0}
        for (before, old), (at, new) in zip(self.samples, self.samples[1:], strict=False):
            if not started <= at <= ended:
                continue
            where = "slow_windows" if round(at - started, 1) in windows else "elsewhere"
            seconds[where] += at - before
            counts[where] += 1
            for kind, value in new.items():
                change = value if kind == "worker_threads_ran" else value - old.get(kind, 0.0)
                spent[where][kind] = spent[where].get(kind, 0.0) + change
        return {where: {kind: round(total / (counts[where] if kind == "worker_threads_ran"
                                             else seconds[where]), 3)
                        for kind, total in sorted(kinds.items())}
                for where, kinds in spent.items() if seconds[where]}


def claims(metrics_url: str) -> dict[str, float]:
    """The worker's webhooks_job_claims_total by `found` (its /metrics, summed over its
    processes)."""
    found: dict[str, float] = {}
    text = requests.get(metrics_url, timeout=5).text
    for family in text_string_to_metric_families(text):
        if family.name == "webhooks_job_claims":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    found[sample.labels["found"]] = sample.value
    return found


def _batches(log: Path, started: float, ended: float) -> list[tuple[float, float, int]]:
    """(seconds from the start, duration, jobs claimed) of each batch the worker logged."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if record.get("msg") != "batch committed":
            continue
        at = datetime.fromisoformat(record["ts"]).timestamp()
        if started <= at <= ended:
            found.append((round(at - started, 3), float(record["seconds"]),
                          int(record["claimed"])))
    return found


def one_run(target: stack.Target, base: str, engine: sa.Engine, sampler: WaitSampler,
            cpu: CpuSampler, metrics_url: str, rate: int, seconds: float) -> dict[str, Any]:
    with engine.connect() as conn:
        checkpoints, autovacuums = conn.execute(MAINTENANCE).one()
    claimed_before = claims(metrics_url)
    started = time.time()
    sent, errors = load.open_loop(base, rate, seconds, stack.STRIPE_SECRET)
    applied = wait_applied(target, [s.event_id for s in sent], timeout=60)
    ended = time.time()
    with engine.connect() as conn:
        checkpoints_after, autovacuums_after = conn.execute(MAINTENANCE).one()
    events = [((applied[s.event_id] - s.acked_at) * 1000, s.acked_at - started,
               applied[s.event_id] - started) for s in sent if s.event_id in applied]
    slow = [event for event in events if event[0] > SLOW_MS]
    by_ack: collections.Counter[float] = collections.Counter(round(e[1], 1) for e in slow)
    # A slow event's job was claimed up to its delay before its done mark: the windows its
    # batch ran in are the 0.1 s slots of its last 0.2 s.
    windows = {round(e[2] - back, 1) for e in slow for back in (0.05, 0.15)}
    inside, outside = Waits(), Waits()
    for at, rows in sampler.samples:
        if started <= at <= ended:
            (inside if round(at - started, 1) in windows else outside).add(rows)
    batches = _batches(target.logs / "worker-tail.log", started, ended)
    durations = [batch[1] for batch in batches]
    claimed = {found: count - claimed_before.get(found, 0.0)
               for found, count in claims(metrics_url).items()}
    return {
        "rate": rate, "acked": len(sent), "errors": errors, "not_applied": len(sent) - len(events),
        "delay_p99_ms": round(load.percentile([e[0] for e in events], 99), 1),
        "delay_max_ms": round(max((e[0] for e in events), default=0.0), 1),
        "ack_p99_ms": round(load.percentile([s.latency_ms for s in sent], 99), 1),
        "slow_events": len(slow),
        "slow_by_ack_second": {str(k): v for k, v in sorted(by_ack.items())},
        "checkpoints": checkpoints_after - checkpoints,
        "autovacuum_runs": int(autovacuums_after - autovacuums),
        "batches": len(batches),
        "jobs_per_batch": round(sum(b[2] for b in batches) / max(len(batches), 1), 2),
        "batch_seconds_p50": round(load.percentile(durations, 50), 4),
        "batch_seconds_p99": round(load.percentile(durations, 99), 4),
        "longest_batches": sorted(batches, key=lambda b: -b[1])[:5],
        "waits_in_slow_windows": inside.summary(), "waits_elsewhere": outside.summary(),
        "cores": cpu.cores(started, ended, windows),
        "claims_found_jobs": int(claimed.get("jobs", 0)),
        "claims_found_none": int(claimed.get("none", 0)),
    }


def _print(n: int, run: dict[str, Any]) -> None:
    print(f"run {n}: delay p99 {run['delay_p99_ms']} ms, max {run['delay_max_ms']}, ack p99 "
          f"{run['ack_p99_ms']} ms; {run['slow_events']} over {SLOW_MS:g} ms; checkpoints "
          f"{run['checkpoints']}, autovacuum runs {run['autovacuum_runs']}")
    print(f"  slow events by acknowledgement (s from the start: count): "
          f"{run['slow_by_ack_second']}")
    print(f"  claims that found jobs {run['claims_found_jobs']}, that found none "
          f"{run['claims_found_none']}")
    print(f"  batches {run['batches']}, {run['jobs_per_batch']} jobs each, p50 "
          f"{run['batch_seconds_p50']} s, p99 {run['batch_seconds_p99']} s; longest (at s, s, "
          f"jobs): {run['longest_batches'][:3]}")
    for label, waits in (("where slow events were applied", run["waits_in_slow_windows"]),
                         ("elsewhere", run["waits_elsewhere"])):
        print(f"  backends per sample {label} ({waits['samples']} samples): "
              f"{waits['by_event']}")
    for where, cores in run["cores"].items():
        print(f"  cores used {where.replace('_', ' ')}: {cores}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.e2e_tail", description=__doc__)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=0,
                        help="seconds at the same rate before each run")
    parser.add_argument("--worker-args", default="",
                        help="extra `webhooks worker` options, e.g. '--threads 4'")
    stack.add_server_options(parser, broker_db=10)
    args = parser.parse_args(argv)
    name = "webhooks_bench_e2e_tail"
    logs = Path(tempfile.mkdtemp(prefix="webhooks-bench-e2e-tail-"))
    target = stack.prepare(args.admin_url, name, args.broker_url, logs)
    engine = target.engine()
    runs = []
    try:
        metrics_port = stack.free_port()
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        worker = stack.start("worker-tail", ["worker", *args.worker_args.split()], target,
                             {"LOG_FORMAT": "json", "WORKER_METRICS_PORT": str(metrics_port)})
        try:
            wait_ready(logs / "worker-tail.log", worker)
            with stack.web(target, name="web-tail") as (base, web), \
                    WaitSampler(engine) as sampler, CpuSampler(target, web, worker) as cpu:
                load.open_loop(base, 100, 2, stack.STRIPE_SECRET)
                for n in range(args.runs):
                    if args.warmup:
                        load.open_loop(base, args.rate, args.warmup, stack.STRIPE_SECRET)
                    runs.append(one_run(target, base, engine, sampler, cpu, metrics_url,
                                        args.rate, args.seconds))
                    _print(n, runs[-1])
        finally:
            stack.stop(worker)
    finally:
        engine.dispose()
        stack.drop(args.admin_url, name)
    within = sum(run["delay_p99_ms"] <= SLOW_MS for run in runs)
    print(f"{within} of {len(runs)} runs with a delay p99 within {SLOW_MS:g} ms "
          f"(load average {stack.load_average()})")
    report.save_tool_run("e2e_tail", argv, "e2e-tail", {"runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
