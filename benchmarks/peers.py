"""`python -m benchmarks --only peers` (part of a full run and, small, of --smoke): the
product beside the two peers a user might run instead (`--peers DIR`, default $BENCH_PEERS
or ../shared/peers next to the repository; its README says what each one is).

- seed-node: the seed guide's Node/Express handler, which applies the invoice inside the
  request. It and `webhooks web` take the ingest scenario's load (scenarios.closed_loop_run:
  the same generator, connections, duration and signed unique Stripe invoice events), in
  alternated runs (web, node, web, node...), no worker running for either, each on a
  database of its own on the same Postgres server. Per run: acknowledgements a second,
  p50 / p99, the server's CPU per acknowledgement, the answers that were not 2xx, and what
  the server kept: seed-node's completed `processed_webhooks` rows (its primary key is the
  event id: a row per event at most), each with its outbox row and its credit, against the
  acknowledgements (the load generators count answers, not ids: a row without its
  acknowledgement is a request in flight when a run ended); the product's jobs likewise.
  The ratio: the product's median rate ÷ seed-node's.
- procrastinate: one procrastinate worker process (the peer's `driver.py drain`) and the
  product's worker (scenarios.drain, `webhooks worker` with the worker scenario's options)
  draining the same invoice jobs (scenarios.seed_jobs' customers, amounts and ids, deferred
  with `driver.py defer`), alternated, at the product's concurrency (its processes
  times threads). The driver times its worker from its start, start-up included; the product's
  drain starts at the sweep after its worker is ready (`first_done_s` shows procrastinate's
  start-up). The ratio: the product's median jobs/s ÷ procrastinate's.

Each peer is copied to ~/.cache/webhooks-bench/peers/ (the peers' folder stays read-only),
installed there once (`npm install`; a venv with requirements.txt) and reinstalled when
its package.json or requirements.txt changes. Without the peers' folder, node or npm, or
when an install fails, that part is skipped with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks import scenarios, stack

DEFAULT_FOLDER = stack.ROOT.parent / "shared" / "peers"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "webhooks-bench" / \
    "peers"
RUNS = 2  # runs of each side in a full run
SMOKE_RUNS = 1
TARGET_INGEST = 1.5  # the product's acks/s ÷ seed-node's
TARGET_WORKER = 5.0  # the product's jobs/s ÷ procrastinate's
AMOUNT = 1999  # scenarios.seed_jobs' invoices, each of this amount in usd


class Skipped(Exception):
    """A peer that cannot run here: its reason is recorded, the run goes on."""


def folder(option: str | None) -> Path:
    """--peers, else $BENCH_PEERS, else ../shared/peers beside the repository."""
    return Path(option or os.environ.get("BENCH_PEERS") or DEFAULT_FOLDER).resolve()


def run(target: stack.Target, plan: scenarios.Plan, admin_url: str, peers: Path,
        runs: int) -> dict[str, Any]:
    """Both comparisons; a part that cannot run here is {"skipped": reason}."""
    if not peers.is_dir():
        return {"skipped": f"no peers folder at {peers} (--peers DIR or BENCH_PEERS)"}
    result: dict[str, Any] = {"folder": str(peers), "runs_per_side": runs}
    for name, part in (("node", _node), ("procrastinate", _procrastinate)):
        try:
            result[name] = part(target, plan, admin_url, peers, runs)
        except Skipped as reason:
            result[name] = {"skipped": str(reason)}
            print(f"  {name}: skipped: {reason}", flush=True)
    return result


# --- seed-node beside `webhooks web` ----------------------------------------------------


def _node(target: stack.Target, plan: scenarios.Plan, admin_url: str, peers: Path,
          runs: int) -> dict[str, Any]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise Skipped("node or npm is not installed")
    home = _copied(peers / "seed-node")
    _installed(home, "package.json", [npm, "install", "--no-audit", "--no-fund"],
               home / "node_modules")
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
    url = _own_database(admin_url, _name(target, "node"), home / "schema.sql")
    rows: list[dict[str, Any]] = []
    try:
        for number in range(1, runs + 1):
            rows.append({"side": "product", "run": number,
                         **_checked(scenarios.ingest_run(target, plan, f"web-peers-{number}"),
                                    plan)})
            print(_ingest_line(rows[-1]), flush=True)
            rows.append({"side": "node", "run": number,
                         **_node_run(target, plan, url, [node, str(home / "server.js")],
                                     f"seed-node-{number}")})
            print(_ingest_line(rows[-1]), flush=True)
    finally:
        stack.drop(admin_url, _name(target, "node"))
    product, peer = (_median(rows, side, "rps") for side in ("product", "node"))
    return {"peer": "seed-node", "node": version.strip(), "connections": plan.connections,
            "seconds": plan.ingest_seconds, "tool": rows[0]["tool"],
            "event_type": "invoice.paid", "runs_per_side": runs, "runs": rows,
            "product_rps": product, "node_rps": peer,
            "product_p99_ms": [row["p99_ms"] for row in rows if row["side"] == "product"],
            "node_p99_ms": [row["p99_ms"] for row in rows if row["side"] == "node"],
            "ratio": round(product / peer, 3) if peer else None, "target": TARGET_INGEST,
            "all_kept": all(row["missing"] == 0 for row in rows),
            "errors": sum(row["errors"] for row in rows)}


def _node_run(target: stack.Target, plan: scenarios.Plan, url: str, command: list[str],
              name: str) -> dict[str, Any]:
    """seed-node on emptied tables, measured as the ingest scenario measures the web; then
    what it kept."""
    _execute(url, "TRUNCATE processed_webhooks, accounts, outbox RESTART IDENTITY")
    port = stack.free_port()
    process = stack.start(name, [], target, {"DATABASE_URL": url, "PORT": str(port),
                                             "STRIPE_WEBHOOK_SECRET": stack.STRIPE_SECRET},
                          command=command)
    try:
        _wait_port(port, process)
        figures = scenarios.closed_loop_run(f"http://127.0.0.1:{port}", process, plan)
    finally:
        stack.stop(process)
    kept = _query(url, """
        SELECT (SELECT count(*) FROM processed_webhooks WHERE status = 'completed'),
               (SELECT count(*) FROM processed_webhooks WHERE status <> 'completed'),
               (SELECT count(*) FROM outbox),
               (SELECT coalesce(sum(balance), 0) FROM accounts)""")
    completed, unfinished, emails, credited = kept
    return {**_checked({**figures, "kept": completed}, plan), "not_completed": unfinished,
            "outbox_rows": emails, "credited_once": credited == completed * AMOUNT}


def _checked(figures: dict[str, Any], plan: scenarios.Plan) -> dict[str, Any]:
    """`missing`: acknowledged but not kept (must be 0); `in_flight`: kept, not
    acknowledged (requests the end of a run cut off: at most one a connection a run)."""
    acked = figures.pop("acked_with_warmup")
    return {**figures, "acked_with_warmup": acked, "missing": max(acked - figures["kept"], 0),
            "in_flight": max(figures["kept"] - acked, 0)}


def _ingest_line(row: dict[str, Any]) -> str:
    who = "webhooks web" if row["side"] == "product" else "seed-node"
    return (f"  {who:<13} run {row['run']}  {row['rps']:8.1f} acks/s  p50 {row['p50_ms']:6.2f} "
            f"ms  p99 {row['p99_ms']:7.2f} ms  CPU {row['web_cpu_ms_per_ack']} ms/ack  "
            f"errors {row['errors']}  missing {row['missing']}  (load {row['load_average']})")


def _wait_port(port: int, process: stack.Process, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise RuntimeError(f"{process.name} exited with {process.popen.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{process.name} did not listen on {port} within {timeout}s")


# --- procrastinate beside `webhooks worker` -----------------------------------------------


def _procrastinate(target: stack.Target, plan: scenarios.Plan, admin_url: str, peers: Path,
                   runs: int) -> dict[str, Any]:
    home = _copied(peers / "procrastinate")
    python = home / "venv" / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(home / "venv")], home, "python -m venv")
    _installed(home, "requirements.txt",
               [str(python), "-m", "pip", "install", "-q", "-r", "requirements.txt"],
               home / "venv" / "lib")
    version = subprocess.run([str(python), "-c", "import importlib.metadata as m; "
                              "print(m.version('procrastinate'))"],
                             capture_output=True, text=True).stdout.strip()
    jobs = home / f"jobs-{plan.worker_jobs}.jsonl"
    jobs.write_text("".join(json.dumps(job) + "\n" for job in seeded_jobs(plan.worker_jobs)))
    concurrency = scenarios._worker_concurrency(plan.worker_args)
    measured = replace(plan, idle_seconds=0)
    rows: list[dict[str, Any]] = []
    try:
        for number in range(1, runs + 1):
            drained = scenarios.drain(target, measured, name=f"worker-peers-{number}")
            rows.append({"side": "product", "run": number, **drained["app"],
                         "load_average": drained["load_average"]})
            print(_drain_line(rows[-1]), flush=True)
            rows.append({"side": "procrastinate", "run": number,
                         **_procrastinate_run(target, admin_url, home, python, jobs,
                                              plan.worker_jobs, concurrency, number)})
            print(_drain_line(rows[-1]), flush=True)
    finally:
        stack.reset(target)
        stack.drop(admin_url, _name(target, "procrastinate"))
    product, peer = (_median(rows, side, "jobs_per_s") for side in ("product", "procrastinate"))
    return {"peer": "procrastinate", "procrastinate": version, "jobs": plan.worker_jobs,
            "concurrency": concurrency, "worker_args": list(plan.worker_args),
            "runs_per_side": runs, "runs": rows,
            "product_jobs_per_s": product, "procrastinate_jobs_per_s": peer,
            "ratio": round(product / peer, 3) if peer else None, "target": TARGET_WORKER,
            "all_done": all(row.get("outcome", "done") == "done" for row in rows)}


def seeded_jobs(count: int) -> list[dict[str, Any]]:
    """scenarios.seed_jobs' invoices as procrastinate's apply_invoice arguments."""
    from benchmarks.events import CUSTOMERS

    return [{"customer_id": f"cus_{n % CUSTOMERS}", "currency": "usd", "amount": AMOUNT,
             "invoice_id": f"in_seed_{n}", "event_id": f"evt_seed_{n}"}
            for n in range(1, count + 1)]


def _procrastinate_run(target: stack.Target, admin_url: str, home: Path, python: Path,
                       jobs: Path, count: int, concurrency: int, number: int) -> dict[str, Any]:
    """A fresh database: the peer's schema, the jobs deferred, one worker's drain."""
    name = _name(target, "procrastinate")
    url = _own_database(admin_url, name)
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("PYTHONPATH", None)
    driver = [str(python), "driver.py"]
    _driver([*driver, "setup"], home, env)
    deferred = _driver([*driver, "defer", str(jobs)], home, env)
    loadavg = stack.load_average()
    drained = _driver([*driver, "drain", "--expect", str(count), "--concurrency",
                       str(concurrency), "--timeout", str(max(150, count / 20)),
                       "--log", str(target.logs / f"procrastinate-{number}.log")], home, env,
                      check=False)
    ledger = _query(url, "SELECT count(*), (SELECT count(*) FROM outbox) FROM ledger_entries")
    return {"jobs": count, "seconds": drained["seconds"], "jobs_per_s": drained["rate"],
            "first_done_s": drained["first_done_s"], "outcome": drained["outcome"],
            "counts": drained["counts"], "ledger_entries": ledger[0], "outbox_rows": ledger[1],
            "defer_seconds": deferred["seconds"], "concurrency": concurrency,
            "load_average": loadavg}


def _driver(command: list[str], home: Path, env: Mapping[str, str],
            check: bool = True) -> dict[str, Any]:
    """One driver.py command; its `RESULT {json}` line."""
    done = subprocess.run(command, cwd=home, env=dict(env), capture_output=True, text=True,
                          timeout=1800)
    line = next((text for text in done.stdout.splitlines() if text.startswith("RESULT ")), "")
    if not line or (check and done.returncode != 0):
        raise RuntimeError(f"{' '.join(command[1:3])} failed: "
                           f"{(done.stderr or done.stdout).strip()[-800:]}")
    result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    if "error" in result:
        raise RuntimeError(f"{' '.join(command[1:3])}: {result['error']}")
    return result


def _drain_line(row: dict[str, Any]) -> str:
    who = "webhooks worker" if row["side"] == "product" else "procrastinate"
    extra = (f"start-up to first job {row['first_done_s']} s, {row['outcome']}"
             if row["side"] == "procrastinate"
             else f"worker CPU {row['worker_cpu_ms_per_job']} ms/job")
    return (f"  {who:<15} run {row['run']}  {row['jobs_per_s']:8.1f} jobs/s  "
            f"{row['jobs']} jobs in {row['seconds']} s  ({extra}; load {row['load_average']})")


# --- the peers' copies, installs and databases -------------------------------------------


def _copied(source: Path) -> Path:
    """SOURCE's files copied into the cache (what the install left there is kept)."""
    if not source.is_dir():
        raise Skipped(f"no {source}")
    home = CACHE / source.name
    shutil.copytree(source, home, dirs_exist_ok=True, copy_function=_writable_copy)
    return home


def _writable_copy(source: str, destination: str) -> None:
    if os.path.exists(destination):
        os.chmod(destination, 0o644)  # the peers' files are read-only
    shutil.copyfile(source, destination)


def _installed(home: Path, manifest: str, command: list[str], result: Path) -> None:
    """Run the install `command` in HOME unless it already ran for this manifest."""
    stamp = home / ".installed"
    digest = hashlib.sha256((home / manifest).read_bytes()).hexdigest()
    if result.exists() and stamp.exists() and stamp.read_text() == digest:
        return
    print(f"  installing {home.name}: {Path(command[0]).name} {' '.join(command[1:])}",
          flush=True)
    _run(command, home, f"{home.name}'s install")
    stamp.write_text(digest)


def _run(command: list[str], home: Path, what: str) -> None:
    try:
        done = subprocess.run(command, cwd=home, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise Skipped(f"{what} failed: {error}") from error
    if done.returncode != 0:
        raise Skipped(f"{what} failed: {(done.stderr or done.stdout).strip()[-500:]}")


def _name(target: stack.Target, peer: str) -> str:
    return f"{sa.make_url(target.database_url).database}_{peer}"


def _own_database(admin_url: str, name: str, schema: Path | None = None) -> str:
    """Database NAME (re)created on admin_url's server, with SCHEMA applied; its URL."""
    url = stack.create_database(admin_url, name)
    if schema:
        _execute(url, schema.read_text())
    return url


def _execute(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.encode())


def _query(url: str, sql: str) -> tuple[Any, ...]:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(sql.encode()).fetchone()
    assert row is not None
    return tuple(row)


def _median(rows: list[dict[str, Any]], side: str, key: str) -> float:
    return round(statistics.median(row[key] for row in rows if row["side"] == side), 1)


# --- the summary ------------------------------------------------------------------------


def print_summary(result: dict[str, Any], targets: Mapping[str, float]) -> None:
    if "skipped" in result:
        print(f"peers skipped: {result['skipped']}")
        return
    printers: dict[str, Callable[[dict[str, Any], Mapping[str, float]], None]] = {
        "node": _print_node, "procrastinate": _print_procrastinate}
    for name, printer in printers.items():
        part = result.get(name, {})
        if "skipped" in part:
            print(f"{name}: skipped ({part['skipped']})")
        elif part:
            printer(part, targets)
    sys.stdout.flush()


def _print_node(part: dict[str, Any], targets: Mapping[str, float]) -> None:
    print(f"ingest beside seed-node ({part['node']}): {part['connections']} connections, "
          f"{part['seconds']} s, {part['tool']}, {part['runs_per_side']} run(s) each")
    print(f"  webhooks web {part['product_rps']:9.1f} acks/s (median)  p99 of each run "
          f"{', '.join(str(p) for p in part['product_p99_ms'])} ms")
    print(f"  seed-node    {part['node_rps']:9.1f} acks/s (median)  p99 of each run "
          f"{', '.join(str(p) for p in part['node_p99_ms'])} ms")
    print(f"  ratio webhooks web / seed-node {part['ratio']} (target >= "
          f"{targets['ingest_over_node']}); errors {part['errors']}; every acknowledged "
          f"event kept: {'yes' if part['all_kept'] else 'NO'}")


def _print_procrastinate(part: dict[str, Any], targets: Mapping[str, float]) -> None:
    print(f"worker beside procrastinate {part['procrastinate']}: {part['jobs']} invoice jobs, "
          f"concurrency {part['concurrency']} (the product worker's processes x threads)")
    print(f"  webhooks worker {part['product_jobs_per_s']:9.1f} jobs/s (median)")
    print(f"  procrastinate   {part['procrastinate_jobs_per_s']:9.1f} jobs/s (median)")
    print(f"  ratio webhooks worker / procrastinate {part['ratio']} (target >= "
          f"{targets['worker_over_procrastinate']}); every run drained: "
          f"{'yes' if part['all_done'] else 'NO'}")
