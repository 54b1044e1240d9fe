"""pgbench running the product's SQL (ingest.sql, worker.sql) at a given concurrency: the
ceiling the database alone allows on this machine, in the same run as the real processes."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks.load import percentile
from webhooks.shared import queries

HERE = Path(__file__).resolve().parent
PGBENCH_PATHS = ("/usr/lib/postgresql/15/bin/pgbench", "/usr/lib/postgresql/16/bin/pgbench")


@dataclass
class PgbenchResult:
    clients: int
    transactions: int
    seconds: float
    tps: float
    p50_ms: float
    p99_ms: float
    failed: int

    def summary(self, per_transaction: int = 1) -> dict[str, Any]:
        return {"clients": self.clients, "tps": round(self.tps, 1),
                "units_per_s": round(self.tps * per_transaction, 1),
                "p50_ms": round(self.p50_ms, 2), "p99_ms": round(self.p99_ms, 2),
                "transactions": self.transactions, "failed": self.failed}


def executable() -> str | None:
    return shutil.which("pgbench") or next((p for p in PGBENCH_PATHS if os.path.exists(p)), None)


def run(database_url: str, script: Path, clients: int, *, seconds: float | None = None,
        transactions: int | None = None) -> PgbenchResult | None:
    """Run `script` (prepared statements, as psycopg does after a few executions)."""
    binary = executable()
    if binary is None:
        return None
    url = sa.make_url(database_url)
    args = [binary, "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)),
            "-h", url.host or "127.0.0.1", "-p", str(url.port or 5432),
            "-U", url.username or "postgres", "-f", str(script), "-l"]
    args += ["-T", str(max(1, round(seconds)))] if seconds else ["-t", str(transactions)]
    env = {**os.environ, "PGPASSWORD": url.password or ""}
    with tempfile.TemporaryDirectory(prefix="pgbench-") as folder:
        done = subprocess.run([*args, "--log-prefix", f"{folder}/tx", url.database or "postgres"],
                              capture_output=True, text=True, env=env, cwd=folder,
                              timeout=(seconds or 120) + 120)
        latencies = _logged_latencies(folder)
    report = done.stdout
    tps = _number(r"tps = ([\d.]+) \(without initial connection time\)", report)
    elapsed = _number(r"duration: ([\d.]+) s", report) or _processed_time(report)
    processed = int(_number(r"number of transactions actually processed: (\d+)", report) or 0)
    failed = int(_number(r"number of failed transactions: (\d+)", report) or 0)
    if tps is None:
        raise RuntimeError(f"pgbench failed: {done.stderr.strip()[-500:]}")
    if done.returncode != 0:
        failed += 1  # a client aborted (worker.sql: no job left to claim)
    return PgbenchResult(clients, processed, elapsed or 0.0, tps, percentile(latencies, 50),
                         percentile(latencies, 99), failed)


def _logged_latencies(folder: str) -> list[float]:
    """Per-transaction latencies (ms) from pgbench's -l logs."""
    latencies: list[float] = []
    for path in glob.glob(f"{folder}/tx*"):
        with open(path) as log:
            for line in log:
                fields = line.split()
                if len(fields) >= 3 and fields[2].isdigit():
                    latencies.append(int(fields[2]) / 1000)
    return latencies


def _number(pattern: str, text: str) -> float | None:
    match = re.search(pattern, text)
    return float(match.group(1)) if match else None


def _processed_time(report: str) -> float | None:
    tps = _number(r"tps = ([\d.]+)", report)
    processed = _number(r"number of transactions actually processed: (\d+)", report)
    return processed / tps if tps and processed else None


_BINDING = re.compile(r"^-- :(?P<name>\w+) (?P<value>.+)$", re.MULTILINE)


def ingest_script(folder: Path, template: Path = HERE / "ingest.sql") -> Path:
    """`template` (ingest.sql, search_ingest.sql) with queries.EventJobInsert, the ingest's
    own statement, in place of EVENT_JOB_INSERT: each of its parameters replaced by the
    value that the template's `-- :name value` line binds it to, so that the script runs
    whatever the statement is today. Every parameter must be bound."""
    text = template.read_text()
    bound = {m["name"]: m["value"] for m in _BINDING.finditer(text)}
    statement = str(queries.EventJobInsert.text).strip()
    unbound = sorted(set(queries.EventJobInsert.compile().params) - set(bound))
    if unbound:
        raise ValueError(f"{template.name} binds no value to {', '.join(unbound)}")
    for name, value in bound.items():  # not a cast's `::type`: only a lone `:name`
        statement = re.sub(rf"(?<![:\w]):{name}\b", f"({value})".replace("\\", "\\\\"),
                           statement)
    path = folder / template.name
    path.write_text(re.sub(r"^EVENT_JOB_INSERT;$", lambda _m: statement + ";", text,
                           flags=re.MULTILINE))
    return path


def run_ingest(database_url: str, clients: int, *, seconds: float,
               template: Path = HERE / "ingest.sql") -> PgbenchResult | None:
    """run() of ingest_script(template)."""
    with tempfile.TemporaryDirectory(prefix="pgbench-ingest-") as folder:
        return run(database_url, ingest_script(Path(folder), template), clients,
                   seconds=seconds)


def worker_script(batch: int, folder: Path) -> Path:
    """worker.sql for batches of `batch` jobs: its claim, its per-job block once per job,
    and its done mark, in one transaction."""
    text = (HERE / "worker.sql").read_text().replace("LIMIT BATCH", f"LIMIT {batch}").replace(
        "(EVENT_SEARCH_INSERT)", f"({queries.EVENT_SEARCH_INSERT.strip()})")
    head, _, rest = text.partition("-- job\n")
    block, _, tail = rest.partition("-- end job\n")
    jobs = "".join(block.replace("[K]", f"[{k}]") for k in range(1, batch + 1))
    path = folder / f"worker_batch{batch}.sql"
    path.write_text("BEGIN;\n" + head + jobs + tail + "COMMIT;\n")
    return path
