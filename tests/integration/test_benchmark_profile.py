"""`python -m benchmarks.ingest_profile` measures every stage of a delivery through the
code as it is: each stage's call (the signature check with the route's own Source, the
recording, the whole delivery on the front's path and through the Flask app) runs against
a database of its own. In a child process, since the benchmark's stack points the
environment at its database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROFILE = """
import json, sys, tempfile
from pathlib import Path
from benchmarks import stack
from benchmarks.ingest_profile import measure
admin, broker = sys.argv[1], sys.argv[2]
stack.prepare(admin, "webhooks_test_ingest_profile", broker, Path(tempfile.mkdtemp()))
try:
    print(json.dumps(measure(60)))
finally:
    stack.drop(admin, "webhooks_test_ingest_profile")
"""


def test_the_profile_measures_each_stage_of_a_delivery() -> None:
    admin = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    result = subprocess.run([sys.executable, "-c", PROFILE, admin, "redis://127.0.0.1:6379/13"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    stages = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(stages) == {
        "whole delivery (the front's path, answer)", "whole request (Flask app)",
        "Flask floor (one route, same answer)", "signature check",
        "recording (psycopg, client side)", "log line (DEBUG)", "metrics",
        "wake-up (waker thread)", "unattributed (the front's whole less the stages)"}
    assert stages["whole delivery (the front's path, answer)"] > stages["signature check"] > 0
    assert stages["whole request (Flask app)"] > stages["signature check"]
    assert stages["recording (psycopg, client side)"] > 0
