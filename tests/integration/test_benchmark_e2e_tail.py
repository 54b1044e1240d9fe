"""`python -m benchmarks.e2e_tail` through the real web and worker on a database of its own:
each run's delays, the worker's batches read from its JSON log, the backends' waits
sampled beside them and the CPU each kind of process used. In a child process, since the
benchmark's stack points the environment at its database; the results are printed, not
saved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUN = """
import json, sys
from benchmarks import e2e_tail, report
saved = []
report.save_to_history = lambda results, folder, what: saved.append(results) or []
e2e_tail.main(sys.argv[1:])
print(json.dumps(saved[0]))
"""


def test_the_tail_benchmark_reports_delays_batches_and_waits() -> None:
    admin = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    result = subprocess.run(
        [sys.executable, "-c", RUN, "--runs", "1", "--rate", "50", "--seconds", "1",
         "--admin-url", admin, "--broker-url", "redis://127.0.0.1:6379/13"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = json.loads(result.stdout.strip().splitlines()[-1])["runs"]
    assert run["acked"] == 50 and run["errors"] == 0 and run["not_applied"] == 0
    assert 0 < run["delay_p99_ms"] <= run["delay_max_ms"]
    assert run["batches"] >= 1 and run["jobs_per_batch"] >= 1
    assert run["waits_elsewhere"]["samples"] + run["waits_in_slow_windows"]["samples"] > 0
    cores = run["cores"]["elsewhere"]  # no event is slow at 50/s: one window, the rest
    assert cores["web"] > 0 and cores["worker"] > 0 and cores["machine_busy"] > 0
    assert cores["postgres_backends"] > 0 and cores["worker_threads_ran"] > 0
    assert run["claims_found_jobs"] >= run["batches"] >= 1 and run["claims_found_none"] >= 0
