"""`python -m benchmarks.ingest_floor` serves the bare ingest (signature and the one
statement) under granian in both modes, beside `webhooks web`, on a database of its own.
In a child process, since the benchmark's stack points the environment at its database;
the results are printed, not saved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUN = """
import json, sys
from benchmarks import ingest_floor, report
saved = []
report.save_tool_run = lambda tool, argv, what, results: saved.append(results)
ingest_floor.main(sys.argv[1:])
print(json.dumps(saved[0]))
"""


def test_the_floor_serves_the_bare_ingest_in_both_modes_beside_web() -> None:
    admin = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    result = subprocess.run(
        [sys.executable, "-c", RUN, "--rounds", "1", "--seconds", "1",
         "--admin-url", admin, "--broker-url", "redis://127.0.0.1:6379/13"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads(result.stdout.strip().splitlines()[-1])["runs"]
    assert [run["server"] for run in runs] == ["webhooks web", "thread", "async"]
    for run in runs:
        assert run["ok"] > 0 and run["errors"] == 0 and run["web_cpu_ms_per_ack"] > 0
