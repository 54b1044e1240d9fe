"""`python -m benchmarks --only wave`: the before and after of each change of the wave in one
run, so that no change's cost hides in the drift between runs.

The checkouts (COMMITS, oldest first; `--wave-commits a,b,c` another list, `tree` naming the
working tree): each change's "before" is the checkout listed before it. Each commit is
extracted with `git archive` into a temporary folder; the working tree is this repository
(HEAD with its uncommitted changes); each checkout's packages are compiled before any is
measured. Each gets a database of its own, migrated by its own
migrations (stack.prepare with its code), and its processes run with this venv and its own
code on PYTHONPATH (`webhooks`, or `shared.cli` before the namespace change). Per checkout
and round: the ingest scenario's app side (scenarios.ingest_run: `webhooks web` at the
plan's connections and duration, wrk when installed), then the worker scenario's drain
(scenarios.drain). Rounds alternate the order (round 1 oldest first, round 2 newest first,
`--wave-rounds`), so that drift over the run falls on both sides of each change. Per
checkout: the median over the rounds of acks/s, p99, web CPU per acknowledgement, jobs/s and
worker CPU per job; per change, after ÷ before of each. A checkout that cannot run is
recorded with its error and left out of the rounds; the others go on.

Not part of a full run: it runs the ingest and the drain of eight checkouts in each of
two rounds, longer than the rest of a full run. `--smoke`: two checkouts (SMOKE_COMMITS), one
round, the smoke plan.
"""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks import report, scenarios, stack

TREE = "tree"  # the working tree: this repository, uncommitted changes included
COMMITS = (("bfc610a", "the code issue 42 measured"),
           ("fb61e30", "one import package `webhooks` (the namespace change)"),
           ("d564ac0", "a provider is one record"),
           ("ba02155", "the test kit"),
           ("85f675a", "calls to other APIs"),
           ("525c252", "one dispatch engine"),
           ("0bcd5ac", "partitioned tables"),
           (TREE, "the working tree"))
SMOKE_COMMITS = ("0bcd5ac", TREE)
ROUNDS = 2
SMOKE_ROUNDS = 1
FIGURES = ("rps", "p99_ms", "web_cpu_ms_per_ack", "jobs_per_s", "worker_cpu_ms_per_job")


@dataclass
class Checkout:
    commit: str  # as given, or TREE
    change: str
    code: Path | None = None
    label: str = ""  # the short commit measured (the working tree's with -dirty)
    target: stack.Target | None = None
    error: str = ""
    rounds: list[dict[str, Any]] = field(default_factory=list)


def run(target: stack.Target, plan: scenarios.Plan, admin_url: str,
        commits: list[str], rounds: int) -> dict[str, Any]:
    names = dict(COMMITS)
    checkouts = [Checkout(commit, names.get(commit) or _subject(commit)) for commit in commits]
    database = sa.make_url(target.database_url).database
    with tempfile.TemporaryDirectory(prefix="webhooks-wave-") as folder:
        for checkout in checkouts:
            _prepare(checkout, Path(folder), admin_url, f"{database}_{_slug(checkout.commit)}",
                     target)
        for number in range(1, rounds + 1):
            order = checkouts if number % 2 else checkouts[::-1]
            print(f"  round {number}: {', '.join(c.label or c.commit for c in order)}",
                  flush=True)
            for checkout in order:
                if not checkout.error:
                    _measure(checkout, plan, number)
        for checkout in checkouts:
            if checkout.target is not None:
                stack.drop(admin_url, sa.make_url(checkout.target.database_url).database or "")
    os.environ.update(target.env)  # each prepare pointed this process at its database
    rows = [_row(checkout) for checkout in checkouts]
    return {"commits": rows, "changes": _changes(rows), "rounds": rounds,
            "connections": plan.connections, "ingest_seconds": plan.ingest_seconds,
            "worker_jobs": plan.worker_jobs, "worker_args": list(plan.worker_args)}


def _prepare(checkout: Checkout, folder: Path, admin_url: str, database: str,
             main: stack.Target) -> None:
    """The checkout's code and its migrated database; its error when either fails."""
    try:
        if checkout.commit == TREE:
            checkout.code, checkout.label = stack.ROOT, report.code_commit(stack.ROOT)
        else:
            checkout.label = _git("rev-parse", "--short", f"{checkout.commit}^{{commit}}")
            checkout.code = folder / checkout.label
            checkout.code.mkdir()
            archive = subprocess.run(["git", "-C", str(stack.ROOT), "archive", checkout.label],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(checkout.code)], input=archive, check=True)
        # Compiled now, so that no measured process of the first round compiles it (a file
        # that does not compile fails where it is imported, not here).
        packages = [str(checkout.code / name) for name in ("webhooks", "shared", "ingest",
                                                             "worker")
                    if (checkout.code / name).is_dir()]
        subprocess.run([sys.executable, "-m", "compileall", "-q", *packages],
                       capture_output=True, check=False)
        checkout.target = stack.prepare(admin_url, database, main.broker_url,
                                        main.logs / f"wave-{checkout.label}", checkout.code)
    except (OSError, subprocess.CalledProcessError, RuntimeError) as error:
        checkout.error = f"prepare: {_message(error)}"
        print(f"  {checkout.commit}: {checkout.error}", flush=True)


def _measure(checkout: Checkout, plan: scenarios.Plan, number: int) -> None:
    assert checkout.target is not None
    try:
        ingest = scenarios.ingest_run(checkout.target, plan, f"web-{number}")
        drained = scenarios.drain(checkout.target, replace(plan, idle_seconds=0),
                                  name=f"worker-{number}")
    except (OSError, subprocess.SubprocessError, RuntimeError, TimeoutError,
            sa.exc.SQLAlchemyError) as error:
        checkout.error = f"round {number}: {_message(error)}"
        print(f"  {checkout.label}: {checkout.error}", flush=True)
        return
    figures = {"round": number, **{key: ingest[key] for key in
                                   ("rps", "p50_ms", "p99_ms", "errors", "web_cpu_ms_per_ack",
                                    "tool", "load_average")},
               "jobs_per_s": drained["app"]["jobs_per_s"],
               "worker_cpu_ms_per_job": drained["app"]["worker_cpu_ms_per_job"],
               "drain_load_average": drained["load_average"]}
    checkout.rounds.append(figures)
    print(f"  {checkout.label:<14} round {number}  {figures['rps']:8.1f} acks/s  p99 "
          f"{figures['p99_ms']:7.2f} ms  web CPU {figures['web_cpu_ms_per_ack']} ms/ack  "
          f"{figures['jobs_per_s']:8.1f} jobs/s  worker CPU "
          f"{figures['worker_cpu_ms_per_job']} ms/job  (load {figures['load_average']})",
          flush=True)


def _row(checkout: Checkout) -> dict[str, Any]:
    row: dict[str, Any] = {"commit": checkout.label or checkout.commit, "change": checkout.change,
                           "rounds": checkout.rounds}
    if checkout.error:
        row["error"] = checkout.error
    if checkout.rounds:
        row.update({key: round(statistics.median(r[key] for r in checkout.rounds), 3)
                    for key in FIGURES})
    return row


def _changes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each checkout against the one before it: after ÷ before of each figure."""
    changes = []
    for before, after in itertools.pairwise(rows):
        change: dict[str, Any] = {"change": after["change"], "before": before["commit"],
                                   "after": after["commit"]}
        for key in FIGURES:
            if before.get(key) and after.get(key) is not None:
                change[f"{key}_after_over_before"] = round(after[key] / before[key], 3)
        changes.append(change)
    return changes


def print_summary(result: dict[str, Any]) -> None:
    print(f"wave: {len(result['commits'])} checkouts, {result['rounds']} round(s), medians; "
          f"ingest {result['connections']} connections {result['ingest_seconds']} s, drain "
          f"{result['worker_jobs']} jobs")
    print(f"  {'commit':<14} {'acks/s':>8} {'p99 ms':>8} {'jobs/s':>8}   change")
    for row in result["commits"]:
        if "rps" in row:
            print(f"  {row['commit']:<14} {row['rps']:8.1f} {row['p99_ms']:8.2f} "
                  f"{row['jobs_per_s']:8.1f}   {row['change']}")
        if "error" in row:
            print(f"  {row['commit']:<14} error: {row['error']}")
    for change in result["changes"]:
        ratios = [f"{label} {change[key]}" for label, key in (
            ("acks/s", "rps_after_over_before"), ("p99", "p99_ms_after_over_before"),
            ("jobs/s", "jobs_per_s_after_over_before")) if key in change]
        if ratios:
            print(f"  {change['change']}: after / before {', '.join(ratios)}")
    sys.stdout.flush()


def _subject(commit: str) -> str:
    if commit == TREE:
        return "the working tree"
    try:
        return _git("log", "-1", "--format=%s", commit)[:60]
    except subprocess.CalledProcessError:
        return commit


def _slug(commit: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in commit.lower())[:20]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(stack.ROOT), *args], capture_output=True,
                          text=True, check=True).stdout.strip()


def _message(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    if isinstance(error, subprocess.CalledProcessError) and error.stderr:
        stderr = error.stderr
        text += ": " + (stderr.decode() if isinstance(stderr, bytes) else stderr).strip()
    return text[-800:]
