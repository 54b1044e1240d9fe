"""The scenarios: ingest (closed loop at C connections), worker (drain N invoice jobs),
end-to-end (a steady rate through web, broker and worker), and the WSGI server comparison.
Each returns plain dicts for the report."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks import load, pgbench, stack
from benchmarks.events import CUSTOMERS

HERE = Path(__file__).resolve().parent
# worker/jobs.py applies a batch of up to jobs.BATCH_SIZE jobs in one transaction;
# pgbench runs worker.sql with batches of this many to do the same.
JOBS_PER_TRANSACTION = 50


@dataclass(frozen=True)
class Plan:
    ingest_seconds: float = 10
    connections: int = 16
    sweep: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    sweep_seconds: float = 5
    worker_jobs: int = 20_000
    idle_seconds: float = 10
    rates: tuple[int, ...] = (200, 500)
    e2e_seconds: float = 10
    e2e_repeats: int = 5  # runs at the highest rate (its target: within it in 5 of 5)
    warmup_seconds: float = 2
    prefer_wrk: bool = True
    web_command: tuple[str, ...] = ()  # another server (honouring $PORT); default `webhooks web`
    web_env: tuple[tuple[str, str], ...] = ()
    worker_args: tuple[str, ...] = ()


SMOKE = Plan(ingest_seconds=2, connections=4, sweep=(), worker_jobs=500, idle_seconds=2,
             rates=(100,), e2e_seconds=2, e2e_repeats=1, warmup_seconds=0.5, prefer_wrk=False)


def _web(target: stack.Target, plan: Plan, name: str = "web"):  # type: ignore[no-untyped-def]
    return stack.web(target, list(plan.web_command) or None, dict(plan.web_env), name=name)


# --- ingest ---------------------------------------------------------------------------


def ingest(target: stack.Target, plan: Plan) -> dict[str, Any]:
    stack.reset(target)
    with _web(target, plan) as (base, web):
        app = closed_loop_run(base, web, plan)
        loadavg_before = app.pop("load_average")
        app.pop("acked_with_warmup")
        web.sample_memory()
        idle_cpu = _idle_cpu(web, plan.idle_seconds / 2)
    recorded = _scalar(target, "SELECT count(*) FROM jobs")
    stack.reset(target)
    reference = pgbench.run_ingest(target.database_url, plan.connections,
                                   seconds=plan.ingest_seconds)
    return {
        "app": app, "pgbench": reference.summary() if reference else None,
        "ratio": round(app["rps"] / reference.tps, 3) if reference and reference.tps else None,
        "rows_recorded": recorded, "memory": web.memory_report(),
        "idle_cpu_percent": idle_cpu, "load_average": loadavg_before,
    }


def ingest_run(target: stack.Target, plan: Plan, name: str = "web") -> dict[str, Any]:
    """The ingest scenario's app side alone (no pgbench, no idle CPU): closed_loop_run of
    `webhooks web` on emptied tables, and the jobs it recorded (`kept`)."""
    stack.reset(target)
    with _web(target, plan, name=name) as (base, web):
        figures = closed_loop_run(base, web, plan)
    figures["kept"] = _scalar(target, "SELECT count(*) FROM jobs")
    stack.reset(target)
    return figures


def closed_loop_run(base: str, server: stack.Process, plan: Plan) -> dict[str, Any]:
    """The ingest scenario's measure of a started server (any that takes the Stripe route):
    a warm-up, then plan.connections for plan.ingest_seconds. The load's summary, the
    server's CPU per acknowledgement, the load average after the warm-up and the
    acknowledgements of both runs (`acked_with_warmup`: what the server must have kept)."""
    warmup = load.closed_loop(base, plan.connections, plan.warmup_seconds, stack.STRIPE_SECRET,
                              plan.prefer_wrk)
    loadavg = stack.load_average()
    cpu_before = server.cpu_seconds()
    result = load.closed_loop(base, plan.connections, plan.ingest_seconds, stack.STRIPE_SECRET,
                              plan.prefer_wrk)
    cpu_ms = (server.cpu_seconds() - cpu_before) * 1000 / max(result.ok, 1)
    return {**result.summary(), "web_cpu_ms_per_ack": round(cpu_ms, 3),
            "load_average": loadavg, "acked_with_warmup": warmup.ok + result.ok}


def ingest_sweep(target: stack.Target, plan: Plan) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with _web(target, plan) as (base, _):
        load.closed_loop(base, 4, plan.warmup_seconds, stack.STRIPE_SECRET, plan.prefer_wrk)
        for connections in plan.sweep:
            result = load.closed_loop(base, connections, plan.sweep_seconds,
                                      stack.STRIPE_SECRET, plan.prefer_wrk)
            rows.append({"connections": connections, "rps": round(result.rps, 1),
                         "p50_ms": round(result.p50_ms, 2), "p99_ms": round(result.p99_ms, 2),
                         "errors": result.errors, "load_average": stack.load_average()})
    for row in rows:
        reference = pgbench.run_ingest(target.database_url, row["connections"],
                                       seconds=plan.sweep_seconds)
        if reference:
            row.update(pgbench_tps=round(reference.tps, 1),
                       pgbench_p99_ms=round(reference.p99_ms, 2))
    stack.reset(target)
    return rows


def servers(target: stack.Target, plan: Plan,
            candidates: dict[str, tuple[list[str], dict[str, str]]]) -> list[dict[str, Any]]:
    """The ingest scenario (app side only) under each candidate server command."""
    rows: list[dict[str, Any]] = []
    for name, (command, env) in candidates.items():
        stack.reset(target)
        variant = Plan(**{**plan.__dict__, "web_command": tuple(command),
                          "web_env": tuple(env.items())})
        with _web(target, variant, name=f"web-{name}") as (base, web):
            load.closed_loop(base, plan.connections, plan.warmup_seconds, stack.STRIPE_SECRET,
                             plan.prefer_wrk)
            cpu_before = web.cpu_seconds()
            result = load.closed_loop(base, plan.connections, plan.ingest_seconds,
                                      stack.STRIPE_SECRET, plan.prefer_wrk)
            cpu_ms = (web.cpu_seconds() - cpu_before) * 1000 / max(result.ok, 1)
            web.sample_memory()
        memory = web.memory_report()
        rows.append({"server": name, **result.summary(), "web_cpu_ms_per_ack": round(cpu_ms, 3),
                     "load_average": stack.load_average(),
                     "rss_mb_total": round(sum(m["peak_rss_mb"] for m in memory), 1)})
        print(f"  {name:<28} {result.rps:8.0f} rps  p50 {result.p50_ms:6.2f} ms  "
              f"p99 {result.p99_ms:6.2f} ms  cpu {cpu_ms:.3f} ms/ack  errors {result.errors}  "
              f"load {stack.load_average()}", flush=True)
    stack.reset(target)
    return rows


# --- worker ---------------------------------------------------------------------------


def seed_jobs(target: stack.Target, count: int) -> None:
    """`count` pending invoice.paid jobs and their events, inserted directly."""
    engine = target.engine()
    with engine.begin() as conn:
        conn.execute(sa.text("""
            INSERT INTO webhook_events (provider, source, event_id, event_type, payload)
            SELECT 'stripe', 'stripe', 'evt_seed_' || n, 'invoice.paid', jsonb_build_object(
                'id', 'evt_seed_' || n, 'object', 'event', 'type', 'invoice.paid',
                'created', extract(epoch FROM now())::bigint,
                'data', jsonb_build_object('object', jsonb_build_object(
                    'id', 'in_seed_' || n, 'object', 'invoice',
                    'customer', 'cus_' || (n % :customers), 'amount_paid', 1999,
                    'amount_due', 1999, 'currency', 'usd',
                    'customer_email', 'buyer@example.com')))
            FROM generate_series(1, :count) AS n
        """), {"count": count, "customers": CUSTOMERS})
        conn.execute(sa.text("""
            INSERT INTO jobs (provider, source, event_id, event_type, created_at)
            SELECT provider, source, event_id, event_type, received_at FROM webhook_events
            WHERE event_id LIKE 'evt\\_seed\\_%' ORDER BY id
        """))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE jobs, webhook_events"))
    engine.dispose()


def worker(target: stack.Target, plan: Plan) -> dict[str, Any]:
    drained = drain(target, plan)
    concurrency = drained["app"]["concurrency"]
    batch = JOBS_PER_TRANSACTION
    stack.reset(target)
    seed_jobs(target, plan.worker_jobs)
    transactions = max(plan.worker_jobs // (concurrency * batch), 1)
    with tempfile.TemporaryDirectory() as folder:
        reference = pgbench.run(target.database_url, pgbench.worker_script(batch, Path(folder)),
                                concurrency, transactions=transactions)
    stack.reset(target)
    reference_jobs = reference.tps * batch if reference else None
    return {
        "app": drained["app"],
        "pgbench": {**reference.summary(per_transaction=batch), "jobs_per_transaction": batch}
        if reference else None,
        "ratio": round(drained["app"]["jobs_per_s"] / reference_jobs, 3)
        if reference_jobs else None,
        "memory": drained["memory"], "idle_cpu_percent": drained["idle_cpu_percent"],
        "load_average": drained["load_average"],
    }


def drain(target: stack.Target, plan: Plan, name: str = "worker") -> dict[str, Any]:
    """The worker scenario's drain: plan.worker_jobs invoice jobs seeded, `webhooks worker
    plan.worker_args` started, timed from the sweep after it is ready to the last job's done
    mark (its start-up left out), then until every email is sent; its idle CPU for
    plan.idle_seconds after (None when 0). `name`: the process's log, one per drain (its
    readiness is read there)."""
    stack.reset(target)
    seed_jobs(target, plan.worker_jobs)
    process = stack.start(name, ["worker", *plan.worker_args], target)
    try:
        wait_ready(target.logs / f"{name}.log", process)
        with _sweeper(target) as sweep:
            loadavg = stack.load_average()
            cpu_before = process.cpu_seconds()
            started = time.monotonic()
            sweep()
        _wait_for(target, "SELECT count(*) FROM jobs WHERE status = 'done'", plan.worker_jobs,
                  process, timeout=600)
        drained = time.monotonic() - started
        cpu_ms = (process.cpu_seconds() - cpu_before) * 1000 / plan.worker_jobs
        _wait_for(target, "SELECT count(*) FROM outbox WHERE status = 'sent'", plan.worker_jobs,
                  process, timeout=600)
        emails_drained = time.monotonic() - started
        idle_cpu = None
        if plan.idle_seconds:
            time.sleep(1)  # let the last wake-ups settle before measuring idle
            idle_cpu = _idle_cpu(process, plan.idle_seconds)
    finally:
        stack.stop(process)
    return {
        "app": {"jobs": plan.worker_jobs, "seconds": round(drained, 2),
                "jobs_per_s": round(plan.worker_jobs / drained, 1),
                "worker_cpu_ms_per_job": round(cpu_ms, 3),
                "emails_sent_after_s": round(emails_drained, 2),
                "concurrency": _worker_concurrency(plan.worker_args),
                "batch": _batch_size(target)},
        "memory": process.memory_report(), "idle_cpu_percent": idle_cpu,
        "load_average": loadavg,
    }


def _batch_size(target: stack.Target) -> int:
    """Jobs per claim of the measured checkout (read, not imported: it may be another)."""
    for path, name in (("shared/wakeups.py", "JOBS_PER_MESSAGE"),
                       ("worker/broker.py", "JOBS_PER_MESSAGE"),
                       ("worker/actors.py", "JOB_BATCH_SIZE")):
        file = target.code / path
        if not file.exists():
            continue
        text = file.read_text()
        match = re.search(rf"^{name} = (\d+)", text, re.MULTILINE)
        if match:
            return int(match.group(1))
    return 0


def _worker_concurrency(args: tuple[str, ...]) -> int:
    """processes * threads of `webhooks worker ARGS` (its defaults otherwise)."""
    from webhooks.cli import worker as command

    defaults = {p.name: p.default for p in command.params}
    values = {name: int(str(defaults[name])) for name in ("processes", "threads")}
    for flag, value in zip(args[::2], args[1::2], strict=False):
        values[flag.lstrip("-")] = int(value)
    return values["processes"] * values["threads"]


def _sweep_once(target: stack.Target) -> None:
    """What the clock does when it finds due jobs: enqueue wake-ups for them."""
    with _sweeper(target) as sweep:
        sweep()


@contextmanager
def _sweeper(target: stack.Target) -> Iterator[Callable[[], None]]:
    """_sweep_once's sweep, ready to run: this checkout's in this process; another
    checkout's in a process of its own with its own code (its wake-ups are the ones its
    worker reads), started and imported before, so that a timed sweep costs the same."""
    if target.code == stack.ROOT:
        from webhooks.clock.sweep import sweep
        from webhooks.shared import wakeups
        from webhooks.shared.settings import Settings

        settings = Settings.from_env(target.env)
        engine = target.engine()

        def sweep_here() -> None:
            sweep(engine, wakeups.create_broker(settings))

        try:
            yield sweep_here
        finally:
            engine.dispose()
        return
    core = "webhooks.shared" if (target.code / "webhooks" / "shared").exists() else "shared"
    env = {**os.environ, **target.env, "PYTHONPATH": str(target.code)}
    process = subprocess.Popen([sys.executable, "-c", _SWEEP.format(core=core)],
                               cwd=target.code, env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None

    def said(line: str) -> None:
        if process.stdout.readline().strip() != line:  # type: ignore[union-attr]
            process.kill()
            raise RuntimeError(f"the sweep of {target.code} failed: "
                               f"{process.communicate()[1].strip()[-500:]}")

    def sweep_there() -> None:
        process.stdin.write("sweep\n")  # type: ignore[union-attr]
        process.stdin.flush()  # type: ignore[union-attr]
        said("swept")

    try:
        said("ready")
        yield sweep_there
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


# Another checkout's sweep, imported, then run when asked (one line on stdin). A checkout
# from before the namespace change imports the core as `shared`.
_SWEEP = """
import sys
from webhooks.clock.sweep import sweep
from {core} import db, wakeups
from {core}.settings import Settings

settings = Settings.from_env()
engine, broker = db.create_engine(settings, pool_size=2), wakeups.create_broker(settings)
print("ready", flush=True)
sys.stdin.readline()
sweep(engine, broker)
print("swept", flush=True)
"""


def wait_ready(log: Path, process: stack.Process, timeout: float = 120,
                settle: float = 1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise RuntimeError(f"worker exited: see {log}")
        if log.exists() and "ready for action" in log.read_text(errors="replace"):
            time.sleep(settle)  # every worker process says it; give the others a moment
            return
        time.sleep(0.1)
    raise TimeoutError("worker did not start")


def _wait_for(target: stack.Target, sql: str, expected: int, process: stack.Process,
              timeout: float) -> None:
    engine = target.engine()
    deadline = time.monotonic() + timeout
    try:
        with engine.connect() as conn:
            while conn.execute(sa.text(sql)).scalar_one() < expected:
                conn.rollback()
                process.sample_memory()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{sql} did not reach {expected}")
                time.sleep(0.05)
    finally:
        engine.dispose()


def _idle_cpu(process: stack.Process, seconds: float) -> float:
    """CPU used by the whole process tree while nothing arrives, in % of one core."""
    before = process.cpu_seconds()
    time.sleep(seconds)
    return round((process.cpu_seconds() - before) / seconds * 100, 2)


def _scalar(target: stack.Target, sql: str) -> Any:
    engine = target.engine()
    with engine.connect() as conn:
        value = conn.execute(sa.text(sql)).scalar_one()
    engine.dispose()
    return value


# --- end to end -----------------------------------------------------------------------


def wait_applied(target: stack.Target, event_ids: list[str],
                 timeout: float) -> dict[str, float]:
    """When each event's job was applied: its finished_at (epoch seconds), written by the
    done mark, the last statement of the job's transaction. Waits for all to finish; reads
    nothing while the load runs, so measuring costs the measured processes no CPU."""
    query = sa.text("SELECT event_id, extract(epoch FROM finished_at) FROM jobs "
                    "WHERE event_id = ANY(:ids) AND status = 'done'")
    count = sa.text("SELECT count(*) FROM jobs WHERE event_id = ANY(:ids) "
                    "AND status <> 'pending'")
    engine = target.engine()
    deadline = time.monotonic() + timeout
    try:
        with engine.connect() as conn:
            while (time.monotonic() < deadline
                   and conn.execute(count, {"ids": event_ids}).scalar_one() < len(event_ids)):
                conn.rollback()
                time.sleep(0.1)
            return {row[0]: float(row[1]) for row in conn.execute(query, {"ids": event_ids})}
    finally:
        engine.dispose()


def _open_loop_run(target: stack.Target, plan: Plan, base: str, web: stack.Process,
                   worker_process: stack.Process, rate: int) -> dict[str, Any]:
    """`rate` deliveries a second for plan.e2e_seconds, each delay from its acknowledgement
    to its job's done mark."""
    loadavg = stack.load_average()
    cpu_web, cpu_worker = web.cpu_seconds(), worker_process.cpu_seconds()
    sent, errors = load.open_loop(base, rate, plan.e2e_seconds, stack.STRIPE_SECRET)
    applied = wait_applied(target, [s.event_id for s in sent], timeout=60)
    cpu_web, cpu_worker = (web.cpu_seconds() - cpu_web,
                           worker_process.cpu_seconds() - cpu_worker)
    per_event = 1000 / max(len(sent), 1)
    delays = [(applied[s.event_id] - s.acked_at) * 1000 for s in sent if s.event_id in applied]
    return {
        "rate": rate, "acked": len(sent), "errors": errors,
        "achieved_rate": round(len(sent) / plan.e2e_seconds, 1),
        "not_applied": len(sent) - len(delays),
        "ack": load.describe([s.latency_ms for s in sent]),
        "delay": load.describe(delays), "load_average": loadavg,
        "web_cpu_ms_per_event": round(cpu_web * per_event, 3),
        "worker_cpu_ms_per_event": round(cpu_worker * per_event, 3),
    }


def end_to_end(target: stack.Target, plan: Plan) -> dict[str, Any]:
    stack.reset(target)
    rows: dict[str, Any] = {}
    worker_process = stack.start("worker-e2e", ["worker", *plan.worker_args], target)
    try:
        wait_ready(target.logs / "worker-e2e.log", worker_process)
        with _web(target, plan, name="web-e2e") as (base, web):
            load.open_loop(base, 100, plan.warmup_seconds, stack.STRIPE_SECRET)
            for rate in plan.rates:
                repeats = plan.e2e_repeats if rate == max(plan.rates) else 1
                runs = [_open_loop_run(target, plan, base, web, worker_process, rate)
                        for _ in range(repeats)]
                rows[str(rate)] = {**runs[0],
                                   "delay_p99_ms_runs": [run["delay"]["p99_ms"] for run in runs]}
            web.sample_memory()
    finally:
        stack.stop(worker_process)
    stack.reset(target)
    return {"rates": rows, "memory": web.memory_report() + worker_process.memory_report(),
            "applied_at": "jobs.finished_at"}

