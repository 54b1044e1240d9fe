"""`--only scaleout`: does a second `webhooks worker` group (what a second host runs) drain a
backlog faster, and where does the time go when it stops doing so?

The worker scenario's backlog (scenarios.seed_jobs: N pending invoice.paid jobs) is drained
by one, then two, then three groups of `webhooks worker` (the Procfile's command, with its
default processes and threads or --worker-args), each group a process group of its own,
started side by side against the same database and broker, after a reset and the same
seeding each time. The clock's wake-ups start the drain, as in the worker scenario.

For each: jobs/s from the wake-ups to the last done mark, and the CPU seconds per job of
the worker groups, of the benchmark database's Postgres backends, of the Postgres server's
own processes (WAL writer, checkpointer: they serve every database on the server) and of
Redis, with the cores each kept busy on average (CPU seconds / wall seconds) beside the
whole machine's busy cores (other work included). When one group and its database
already keep every core busy, a second group finds no core to run on: the ratio two / one
then measures the machine, and the CPU per job says what a core more would buy.

`--only scaleout-quota` (run_quota) shows what cores would buy: the same drains with each
group held to a fraction of a core by a cgroup of its own (benchmarks/quota.py), as one small
host each, and Postgres unlimited. There the groups are the bound while Postgres has cores
to spare: the rows add each group's throttling (`cpu.stat`), and for every drain the
Postgres backends' waits (pg_stat_activity sampled: Lock, LWLock, IO), so that where the
ratio stops growing says why.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import sqlalchemy as sa

from benchmarks import quota, scenarios, stack

GROUPS = (1, 2, 3)
JOBS = 20_000
SMOKE_JOBS = 1_000
TARGET_TWO_OVER_ONE = 1.6  # the target
# With CPU quotas: a fourth group, to show where adding groups stops paying.
QUOTA_GROUPS = (1, 2, 3, 4)
QUOTA_JOBS = 10_000
QUOTA_CORES = 0.3  # of a core per group (--quota)
SMOKE_QUOTA = {"groups": (1, 2), "jobs": 500, "cores": 0.5}
TARGET_QUOTA_TWO_OVER_ONE = 1.8  # the target, two quota-limited groups / one
POLL_SECONDS = 0.1  # how often the drain is checked, and the server processes sampled
# The CPU figures, per job and in cores busy: (key, what it measures).
CPU_PARTS = (("workers", "worker groups"), ("postgres_backends", "Postgres, this database"),
             ("postgres_background", "Postgres, server processes"), ("redis", "Redis"))


def run(target: stack.Target, plan: scenarios.Plan, jobs: int) -> dict[str, Any]:
    rows = []
    for groups in GROUPS:
        stack.reset(target)
        scenarios.seed_jobs(target, jobs)
        rows.append(drain(target, jobs, groups, plan.worker_args, label=f"scaleout-{groups}g"))
        print_row(rows[-1])
    stack.reset(target)
    return _result(plan, jobs, rows, TARGET_TWO_OVER_ONE)


def run_quota(target: stack.Target, plan: scenarios.Plan, jobs: int, cores: float,
              groups: tuple[int, ...] = QUOTA_GROUPS,
              postgres_share: bool = False) -> dict[str, Any]:
    """run() with each worker group in a cgroup of its own allowed `cores` of a core; a
    result saying why ("skipped") where cgroups cannot be made. With `postgres_share`, the
    benchmark's own Postgres server (refused when it holds anyone else's database) runs in
    a cgroup of the same high weight and no quota, so that the machine's other work does
    not take its cores."""
    if reason := quota.unavailable():
        print(f"  skipped: {reason}", flush=True)
        return {"skipped": reason, "quota_cores": cores}
    rows = []
    with _postgres_cgroup(target, postgres_share):
        for count in groups:
            stack.reset(target)
            scenarios.seed_jobs(target, jobs)
            with quota.groups(count, cores) as cgroups:
                rows.append(drain(target, jobs, count, plan.worker_args,
                                  label=f"scaleout-quota-{count}g", cgroups=cgroups))
            print_row(rows[-1])
    stack.reset(target)
    postgres = (f"not limited, in a cgroup of weight {quota.SHARES} (a server of its own)"
                if postgres_share else "not limited (the shared server, default weight)")
    return {**_result(plan, jobs, rows, TARGET_QUOTA_TWO_OVER_ONE), "quota_cores": cores,
            "quota_period_us": quota.PERIOD_US, "quota_shares": quota.SHARES,
            "postgres": postgres}


def _postgres_cgroup(target: stack.Target,
                     wanted: bool) -> AbstractContextManager[quota.Group | None]:
    """The benchmark's Postgres server held in a cgroup (quota.hold), when wanted and
    when the server is the benchmark's alone."""
    if not wanted:
        return nullcontext()
    server = stack.postmaster(target)
    if server is None:
        raise RuntimeError("--postgres-share: the benchmark's Postgres is not on this machine")
    if others := stack.other_databases(target):
        raise RuntimeError(f"--postgres-share: the server also holds {', '.join(others)}; "
                           "only a server of the benchmark's own may be moved")
    return quota.hold([server.pid, *(child.pid for child in server.children())], "postgres")


def _result(plan: scenarios.Plan, jobs: int, rows: list[dict[str, Any]],
            target_two: float) -> dict[str, Any]:
    one = rows[0]["jobs_per_s"]
    ratios = {f"{row['groups']}_over_1": round(row["jobs_per_s"] / one, 3) if one else None
              for row in rows if row["groups"] > 1}
    return {"jobs": jobs, "cores": os.cpu_count(),
            "concurrency_per_group": scenarios._worker_concurrency(plan.worker_args),
            "worker_args": list(plan.worker_args), "groups": rows, "ratios": ratios,
            "target_2_over_1": target_two}


def drain(target: stack.Target, jobs: int, groups: int, worker_args: tuple[str, ...],
          label: str, cgroups: list[quota.Group] | None = None) -> dict[str, Any]:
    """Start `groups` worker groups (each in its cgroup, when `cgroups` are given), wake
    them as the clock would, and time the drain of the `jobs` pending jobs already seeded
    (and then of their emails), sampling every process that works for it."""
    command = stack.webhooks_command(target, "worker", *worker_args)
    processes = [stack.start(f"worker-{label}-{n}", [], target,
                             command=cgroups[n - 1].command(command) if cgroups else command)
                 for n in range(1, groups + 1)]
    engine = target.engine()
    try:
        wait_ready(target, processes, cgroups or [])
        throttling = [cgroup.stat() for cgroup in cgroups or ()]
        waits = Waits()
        with engine.connect() as conn:
            poller, pending = conn.execute(sa.text(
                "SELECT pg_backend_pid(), (SELECT count(*) FROM jobs WHERE status = 'pending')"
            )).one()
            conn.rollback()
            if pending != jobs:  # a wake-up left in the broker started the drain early
                raise RuntimeError(f"{pending} pending jobs before the drain, not {jobs}")
            servers = stack.server_cpu(target, exclude={poller})
            commits_before = _commits(conn)
            wal_before = _wal_lsn(conn)
            loadavg = stack.load_average()
            workers_before = sum(process.cpu_seconds() for process in processes)
            machine_before = stack.machine_busy_seconds()
            servers.start()
            started = time.monotonic()
            scenarios._sweep_once(target)
            swept = time.monotonic() - started
            _wait_none(conn, "jobs", processes, servers, timeout=600, waits=waits)
            seconds = time.monotonic() - started
            cpu = {"workers": sum(process.cpu_seconds() for process in processes)
                   - workers_before, **servers.seconds()}
            machine = stack.machine_busy_seconds() - machine_before
            wal = _wal_lsn(conn) - wal_before
            throttled = _throttled(throttling, cgroups or [])
            _wait_none(conn, "outbox", processes, servers, timeout=600)
            emails_seconds = time.monotonic() - started
            done, failed = conn.execute(sa.text(
                "SELECT count(*) FILTER (WHERE status = 'done'), "
                "count(*) FILTER (WHERE status = 'failed') FROM jobs")).one()
        with ThreadPoolExecutor(len(processes)) as pool:  # they shut down in parallel
            list(pool.map(stack.stop, processes))
        commits = _commits_after_disconnect(engine) - commits_before
    finally:
        engine.dispose()
        for process in processes:
            stack.stop(process)  # after a failure; a no-op for those already stopped
    return {
        "groups": groups, "jobs": jobs, "done": done, "failed": failed,
        "seconds": round(seconds, 2), "jobs_per_s": round(jobs / seconds, 1),
        "emails_sent_after_s": round(emails_seconds, 2), "sweep_s": round(swept, 2),
        **{f"{part}_cpu_ms_per_job": round(cpu[part] * 1000 / jobs, 3) if part in cpu else None
           for part, _ in CPU_PARTS},
        **{f"{part}_cores": round(cpu[part] / seconds, 2) if part in cpu else None
           for part, _ in CPU_PARTS},
        "measured_cores": round(sum(cpu.values()) / seconds, 2),
        "commits_per_job": round(commits / jobs, 3),
        "machine_busy_cores": round(machine / seconds, 2), "load_average": loadavg,
        "server_wal_bytes_per_job": round(wal / jobs),
        "postgres_waits": waits.summary(), **throttled,
    }


def wait_ready(target: stack.Target, processes: list[stack.Process],
                cgroups: list[quota.Group]) -> None:
    """Every group started (together: one moment for all to settle) and, with cgroups,
    every process of each in its cgroup (the wrapper moved the leader before it forked),
    or the quota would not hold it."""
    for process in processes:
        scenarios.wait_ready(target.logs / f"{process.name}.log", process, settle=0)
    time.sleep(1)
    for process, cgroup in zip(processes, cgroups, strict=False):
        outside = {proc.pid for proc in process.tree()} - cgroup.pids()
        if outside:
            raise RuntimeError(f"{process.name}: processes {sorted(outside)} are not in "
                               f"{cgroup.path}")


def _throttled(before: list[dict[str, int]], cgroups: list[quota.Group]) -> dict[str, Any]:
    """Each group's cpu.stat since `before`: the periods it ran in, those the quota stopped
    it in, and for how long in all (seconds, summed over its threads' waits); and the
    share of all groups' periods throttled. Nothing without cgroups."""
    if not cgroups:
        return {}
    groups = []
    for start, cgroup in zip(before, cgroups, strict=True):
        now = cgroup.stat()
        groups.append({"nr_periods": now["nr_periods"] - start["nr_periods"],
                       "nr_throttled": now["nr_throttled"] - start["nr_throttled"],
                       "throttled_s": round((now["throttled_time"] - start["throttled_time"])
                                            / 1e9, 2)})
    periods = sum(group["nr_periods"] for group in groups)
    throttled = sum(group["nr_throttled"] for group in groups)
    return {"throttling": groups, "throttled_share": round(throttled / max(periods, 1), 3)}


class Waits:
    """What the benchmark database's active backends were doing, sampled with the drain's
    poll: on CPU ("running"), or waiting on a Lock (rows, transactions, advisory keys), an
    LWLock (WAL insertion, buffers) or IO (the WAL flush at commit). Mean backends per
    state over the samples."""

    QUERY = sa.text(
        "SELECT coalesce(wait_event_type || ':' || wait_event, 'running'), count(*) "
        "FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND state = 'active' GROUP BY 1")

    def __init__(self) -> None:
        self.samples = 0
        self.totals: dict[str, int] = {}

    def sample(self, conn: sa.Connection) -> None:
        self.add(list(conn.execute(self.QUERY).tuples()))

    def add(self, rows: list[tuple[str, int]]) -> None:
        """One sample's rows of QUERY (state, backends), read elsewhere."""
        self.samples += 1
        for state, count in rows:
            self.totals[state] = self.totals.get(state, 0) + int(count)

    def summary(self) -> dict[str, Any]:
        means = {state: round(total / max(self.samples, 1), 2)
                 for state, total in sorted(self.totals.items(), key=lambda kv: -kv[1])}
        kinds: dict[str, float] = {}
        for state, mean in means.items():
            kind = state.split(":")[0]
            kinds[kind] = round(kinds.get(kind, 0) + mean, 2)
        return {"samples": self.samples, "by_kind": kinds, "by_event": means}


def _wal_lsn(conn: sa.Connection) -> int:
    """The server's WAL position in bytes: every database on it writes there."""
    lsn = conn.execute(sa.text("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")).scalar_one()
    conn.rollback()
    return int(lsn)


def _commits(conn: sa.Connection) -> int:
    """Transactions committed in the benchmark database so far (the poller only reads and
    rolls back: what commits is the workers' batches, their emails and the clock's sweep)."""
    count = conn.execute(sa.text("SELECT xact_commit FROM pg_stat_database "
                                 "WHERE datname = current_database()")).scalar_one()
    conn.rollback()  # the next read sees fresh statistics
    return int(count)


def _commits_after_disconnect(engine: sa.Engine, timeout: float = 10) -> int:
    """_commits() once the stopped workers' connections have closed: a backend reports its
    last commits to the statistics when it exits (or after a second, when busy)."""
    deadline = time.monotonic() + timeout
    with engine.connect() as conn:
        while conn.execute(sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()")).scalar_one() and time.monotonic() < deadline:
            conn.rollback()
            time.sleep(0.1)
        conn.rollback()
        return _commits(conn)


def _wait_none(conn: sa.Connection, table: str, processes: list[stack.Process],
               servers: stack.ServerCpu, timeout: float, waits: Waits | None = None) -> None:
    """Until `table` has no pending row. The check reads the pending rows' partial index
    (a count of done rows would read the table ten times a second, on the measured
    cores); the servers are sampled in between, so that no connection's CPU is lost."""
    pending = sa.text(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE status = 'pending')")
    deadline = time.monotonic() + timeout
    while conn.execute(pending).scalar_one():
        if waits:
            waits.sample(conn)
        conn.rollback()
        servers.sample()
        if any(process.popen.poll() is not None for process in processes):
            raise RuntimeError(f"a worker group exited: see {processes[0].name}.log and "
                               "the others in the logs folder")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{table} still had pending rows after {timeout} s")
        time.sleep(POLL_SECONDS)
    conn.rollback()


def print_row(row: dict[str, Any]) -> None:
    """One drain, as it finishes."""
    print(f"  {row['groups']} group(s)  {row['jobs_per_s']:9.1f} jobs/s  drained "
          f"{row['jobs']:,} in {row['seconds']} s  (emails sent after "
          f"{row['emails_sent_after_s']} s; done {row['done']:,}, failed {row['failed']}; "
          f"load {row['load_average']})", flush=True)
    parts = ", ".join(f"{what} {_cell(row, part)}" for part, what in CPU_PARTS)
    print(f"      CPU ms/job (cores busy): {parts}; measured {row['measured_cores']} cores, "
          f"machine {row['machine_busy_cores']} cores busy; "
          f"{row['commits_per_job']} commits/job", flush=True)
    waits = ", ".join(f"{kind} {mean}" for kind, mean in row["postgres_waits"]["by_kind"].items())
    print(f"      Postgres active backends (mean of {row['postgres_waits']['samples']} "
          f"samples): {waits or 'none'}; server WAL {row['server_wal_bytes_per_job']} "
          f"bytes/job; the sweep took {row['sweep_s']} s", flush=True)
    if "throttling" in row:
        print(f"      throttled in {row['throttled_share']:.1%} of the groups' periods ("
              + ", ".join(f"{t['throttled_s']} s" for t in row["throttling"]) + ")", flush=True)


def _cell(row: dict[str, Any], part: str) -> str:
    per_job = row.get(f"{part}_cpu_ms_per_job")
    return "n/a" if per_job is None else f"{per_job} ({row[f'{part}_cores']})"


def print_summary(result: dict[str, Any]) -> None:
    if "skipped" in result:
        print(f"scaleout with CPU quotas skipped: {result['skipped']}")
        return
    one = result["groups"][0]
    limits = (f", each group held to {result['quota_cores']} of a core (Postgres not limited)"
              if "quota_cores" in result else "")
    print(f"scaleout  {result['jobs']:,} invoice jobs, groups of concurrency "
          f"{result['concurrency_per_group']}, on {result['cores']} cores{limits}")
    for row in result["groups"]:
        print(f"  {row['groups']} group(s)  {row['jobs_per_s']:9.1f} jobs/s  "
              f"CPU ms/job: workers {row['workers_cpu_ms_per_job']}, Postgres "
              f"{_sum(row, 'postgres_backends', 'postgres_background')}; "
              f"{row['measured_cores']} cores busy (machine {row['machine_busy_cores']})")
    for name, ratio in result["ratios"].items():
        groups = name.split("_")[0]
        target = (f"  (target >= {result['target_2_over_1']})" if groups == "2" else "")
        print(f"  ratio {groups} groups / 1 group: {ratio}{target}")
    print(f"  at one group the workers and Postgres kept {_cores(one)} of the "
          f"{result['cores']} cores busy")


def _sum(row: dict[str, Any], *parts: str) -> str:
    values = [row[f"{part}_cpu_ms_per_job"] for part in parts]
    return "n/a" if None in values else f"{sum(values):.3f}"


def _cores(row: dict[str, Any]) -> str:
    values = [row[f"{part}_cores"] for part in ("workers", "postgres_backends",
                                                "postgres_background")]
    return "?" if None in values else f"{sum(values):.2f}"
