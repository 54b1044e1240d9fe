"""`python -m benchmarks [--smoke] [--only ingest|worker|e2e|sweep|servers|search|reconcile|
scaleout|scaleout-quota|growth|retention|claim|overview|kit|calls|upgrade|peers|wave]`.

Prints throughput, latency, the ratio to pgbench running the same SQL, end-to-end delay,
peak RSS per process and idle CPU, and saves them with the concurrency chart (results/README.md):
a full run of this checkout becomes results/latest.* (the previous latest.* moves to
results/history/, named by its date and commit) and the README's tables are rewritten;
a partial (--only), named (--tag), --code or otherwise custom run goes to results/history/ as
DATE-COMMIT[-NAME].*; --smoke writes results/smoke.json, which git ignores.
`--only search` (benchmarks/search.py) loads a million events into the database and
compares the search's index options; it is not part of a full run (it takes minutes).
`--only reconcile` (benchmarks/reconcile.py) records 10,000 never-delivered Stripe events
through `webhooks reconcile` against a fake Stripe API, beside the delivery path's rate.
`--only scaleout` (benchmarks/scaleout.py, part of a full run and of --smoke, there with
1,000 jobs) drains the worker scenario's backlog with one, two and three `webhooks worker`
groups side by side, with the CPU each process kind spent per job. `--only scaleout-quota`
(part of a full run and, tiny, of --smoke) drains it with one to four groups each held to
`--quota` of a core by a cgroup (as root, where cgroup v1's cpu controller is mounted;
otherwise skipped with the reason), Postgres unlimited. `--only growth`
(benchmarks/growth.py) measures the ingest and the drain with 0, 3 and 30 days of history
(1,000,000 and 10,000,000 finished events, each day in its partitions) against an empty
database beside, in alternated pairs; like search, it is not part of a full run.
`--only retention` (benchmarks/retention.py; tiny in --smoke, not part of a full run: it
fills a million-event day three times) times a prune of one day by dropping its
partitions against the previous release's row deletes of the same rows (seconds, WAL
bytes), the ingest's p99 during a prune against without, and the dedup keys' bytes per
event kept.
`--only claim` (benchmarks/claim.py; part of a full run and, small, of --smoke) times the
worker's claim with 20,000 jobs of a paused provider at the head of the queue, held, against
none paused. `--only overview` (benchmarks/overview.py; tiny in --smoke) times the console's
overview page over 2,000,000 events and jobs, from the statistics' estimates and exact.
`--only kit` (benchmarks/kit.py; part of a full run and, tiny, of --smoke) times the test
kit's check of 50 events under 50 schedules, for the reference app and the example app.
`--only calls` (benchmarks/calls.py; part of a full run and, tiny, of --smoke) measures
the worker's CPU per job whose handler queues one call to another API against one that
queues one email (2,000 jobs each), and calls made per second by the call dispatch against
the fake Stripe API (within the process's Stripe request budget, and with it lifted) beside
emails sent per second by the outbox against the fake Postmark (one thread, then two).
`--only upgrade` (benchmarks/upgrade.py; tiny in --smoke, not part of a full run: it loads a
million events) runs migration 0023 on a database of the previous release while
deliveries arrive through the previous release's statements, then the current ones: each
step's time, the deliveries' latency in each, and any delivery that failed.
`--only peers` (benchmarks/peers.py; part of a full run and, small, of --smoke, when the
peers' folder is there: `--peers DIR`, default $BENCH_PEERS or ../shared/peers) runs the
ingest scenario's load against `webhooks web` and the seed guide's Node/Express handler,
and the worker scenario's drain beside procrastinate draining the same invoice jobs,
alternated, with the product ÷ peer ratios (a peer that cannot run here is skipped with the
reason). `--only wave` (benchmarks/wave.py; not part of a full run: it measures eight
checkouts; two in --smoke) runs the ingest and the drain of each commit of the wave and of
the working tree, in rounds of alternated order, with each change's after ÷ before
(`--wave-commits`, `--wave-rounds`).
Never fails on a threshold: the numbers are for reading, the targets are printed next to them.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks import (
    calls,
    claim,
    growth,
    kit,
    overview,
    peers,
    reconcile,
    report,
    retention,
    scaleout,
    scenarios,
    search,
    stack,
    upgrade,
    wave,
)

TARGETS = {"ingest_rps": 3000, "ingest_p99_ms": 20, "ingest_over_pgbench": 0.45,
           "worker_jobs_per_s": 2000,
           "e2e_p99_ms_at_500": 100, "idle_cpu_percent": 2,
           "scaleout_2_over_1": scaleout.TARGET_TWO_OVER_ONE,
           "scaleout_quota_2_over_1": scaleout.TARGET_QUOTA_TWO_OVER_ONE,
           "ingest_over_node": peers.TARGET_INGEST,
           "worker_over_procrastinate": peers.TARGET_WORKER}
SCENARIOS = ("ingest", "sweep", "worker", "e2e", "servers", "search", "reconcile", "scaleout",
             "scaleout-quota", "growth", "retention", "claim", "overview", "kit", "calls",
             "upgrade", "peers", "wave")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    plan = scenarios.SMOKE if args.smoke else scenarios.Plan()
    if args.python_load:
        plan = replace(plan, prefer_wrk=False)
    if args.worker_args:
        plan = replace(plan, worker_args=tuple(args.worker_args.split()))
    if args.seconds:
        plan = replace(plan, ingest_seconds=args.seconds, e2e_seconds=args.seconds)
    chosen = args.only or (["ingest", "worker", "e2e", "search", "reconcile", "scaleout",
                            "scaleout-quota", "claim", "overview", "kit", "calls",
                            "upgrade", "retention", "peers"] if args.smoke
                           else ["ingest", "sweep", "worker", "e2e", "reconcile", "scaleout",
                                 "scaleout-quota", "claim", "kit", "calls", "peers"])
    logs = Path(tempfile.mkdtemp(prefix="webhooks-bench-"))
    name = args.database or ("webhooks_bench_smoke" if args.smoke else "webhooks_bench")
    print(f"benchmarks: {', '.join(chosen)}; database {name}; process logs in {logs}; "
          f"load average {stack.load_average()} on {os.cpu_count()} cores", flush=True)
    target = stack.prepare(args.admin_url, name, args.broker_url, logs, Path(args.code))
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                               "commit": report.code_commit(target.code),
                               "command": shlex.join(["python", "-m", "benchmarks", *argv]),
                               "smoke": args.smoke, "cores": os.cpu_count(),
                               "load_average_start": stack.load_average(), "targets": TARGETS}
    for scenario in chosen:
        print(f"\n== {scenario}", flush=True)
        results[scenario] = _run(scenario, target, plan, args)
        if scenario == "search":
            search.print_summary(results[scenario])
        elif scenario == "reconcile":
            reconcile.print_summary(results[scenario])
        elif scenario in ("scaleout", "scaleout-quota"):
            scaleout.print_summary(results[scenario])
        elif scenario == "growth":
            growth.print_summary(results[scenario], TARGETS)
        elif scenario == "retention":
            retention.print_summary(results[scenario])
        elif scenario == "kit":
            kit.print_summary(results[scenario])
        elif scenario == "calls":
            calls.print_summary(results[scenario])
        elif scenario == "upgrade":
            upgrade.print_summary(results[scenario])
        elif scenario == "peers":
            peers.print_summary(results[scenario], TARGETS)
        elif scenario == "wave":
            wave.print_summary(results[scenario])
        elif scenario not in ("claim", "overview"):  # these print their own summary
            report.print_scenario(scenario, results[scenario], TARGETS)
    results["load_average_end"] = stack.load_average()
    written = _save(results, args, Path(args.out))
    print(f"\nload average at the end: {results['load_average_end']}; wrote "
          f"{', '.join(str(p) for p in written)}")
    if not args.keep_database:
        stack.drop(args.admin_url, name)
    return 0


def _save(results: dict[str, Any], args: argparse.Namespace, out: Path) -> list[Path]:
    """smoke.json; or latest.* for a full run of this checkout with the default plan (the
    previous latest.* to history/, the README's tables rewritten); or history/."""
    if args.smoke:
        return report.save(results, out, "smoke")
    custom = (args.worker_args or args.seconds or args.python_load or args.quota
              or args.jobs or args.postgres_share)
    what = args.tag or "-".join(args.only or ()) or ("custom" if custom else "")
    if what or Path(args.code).resolve() != stack.ROOT:
        return report.save_to_history(results, out, what)
    retired = report.retire_latest(out)
    written = report.save(results, out, report.LATEST)
    if retired:
        print(f"moved the previous latest run to {', '.join(str(p) for p in retired)}")
    if (out / "README.md").exists():
        try:
            if report.write_readme(out):
                written.append(out / "README.md")
        except ValueError as error:
            print(f"README tables not rewritten: {error}")
    return written


def _run(scenario: str, target: stack.Target, plan: scenarios.Plan,
         args: argparse.Namespace) -> Any:
    if scenario == "ingest":
        return scenarios.ingest(target, plan)
    if scenario == "sweep":
        return scenarios.ingest_sweep(target, plan)
    if scenario == "worker":
        return scenarios.worker(target, plan)
    if scenario == "e2e":
        return scenarios.end_to_end(target, plan)
    if scenario == "search":
        search_plan = search.SMOKE if args.smoke else search.Plan()
        if args.search_events:
            search_plan = replace(search_plan, events=args.search_events)
        if args.search_options:
            search_plan = replace(search_plan, older=tuple(args.search_options.split(",")))
        return search.run(target, search_plan)
    if scenario == "reconcile":
        return reconcile.run(target, events=reconcile.SMOKE_EVENTS if args.smoke
                             else reconcile.EVENTS, connections=plan.connections,
                             seconds=plan.ingest_seconds, prefer_wrk=plan.prefer_wrk)
    if scenario == "scaleout":
        return scaleout.run(target, plan, scaleout.SMOKE_JOBS if args.smoke else scaleout.JOBS)
    if scenario == "scaleout-quota":
        if args.smoke:
            return scaleout.run_quota(target, plan, scaleout.SMOKE_QUOTA["jobs"],
                                      args.quota or scaleout.SMOKE_QUOTA["cores"],
                                      scaleout.SMOKE_QUOTA["groups"])
        return scaleout.run_quota(target, plan, args.jobs or scaleout.QUOTA_JOBS,
                                  args.quota or scaleout.QUOTA_CORES,
                                  postgres_share=args.postgres_share)
    if scenario == "claim":
        return claim.run(target, **(claim.SMOKE if args.smoke else {}))
    if scenario == "overview":
        return overview.run(target, **(overview.SMOKE if args.smoke else {}))
    if scenario == "growth":
        return growth.run(target, plan, growth.SMOKE if args.smoke else growth.Plan())
    if scenario == "retention":
        return retention.run(target, retention.SMOKE if args.smoke else retention.Plan())
    if scenario == "kit":
        return kit.run(target, **(kit.SMOKE if args.smoke else {}))
    if scenario == "calls":
        return calls.run(target, **(calls.SMOKE if args.smoke else {}))
    if scenario == "upgrade":
        return upgrade.run(target, **(upgrade.SMOKE if args.smoke else {}))
    if scenario == "peers":
        return peers.run(target, plan, args.admin_url, peers.folder(args.peers),
                         peers.SMOKE_RUNS if args.smoke else peers.RUNS)
    if scenario == "wave":
        commits = (args.wave_commits.split(",") if args.wave_commits
                   else list(wave.SMOKE_COMMITS) if args.smoke
                   else [commit for commit, _ in wave.COMMITS])
        rounds = args.wave_rounds or (wave.SMOKE_ROUNDS if args.smoke else wave.ROUNDS)
        return wave.run(target, plan, args.admin_url, commits, rounds)
    return scenarios.servers(target, plan, report.server_candidates())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--smoke", action="store_true",
                        help="a few-second run of ingest, worker, e2e, search, reconcile, "
                             "scaleout, scaleout-quota, claim, overview, kit, calls, "
                             "upgrade, retention and peers (CI)")
    parser.add_argument("--only", action="append", choices=SCENARIOS,
                        help="run only this scenario (repeatable)")
    parser.add_argument("--admin-url", default=os.environ.get(
        "BENCH_ADMIN_URL", os.environ.get("DATABASE_URL",
                                          "postgresql://postgres@127.0.0.1:5432/postgres")),
        help="a Postgres URL used to (re)create the private benchmark database")
    parser.add_argument("--broker-url", default=os.environ.get(
        "BENCH_BROKER_URL", "redis://127.0.0.1:6379/9"),
        help="a Redis database the benchmark may flush (default db 9)")
    parser.add_argument("--database", default=os.environ.get("BENCH_DATABASE", ""),
                        help="the benchmark database's name, dropped and created again "
                             "(default webhooks_bench, --smoke webhooks_bench_smoke): another "
                             "name for a run beside someone else's on the same server")
    parser.add_argument("--worker-args", default="",
                        help="extra `webhooks worker` options, e.g. '--processes 1 --threads 8'")
    parser.add_argument("--python-load", action="store_true",
                        help="the Python load generator even when wrk is installed")
    parser.add_argument("--seconds", type=float, help="ingest and e2e duration")
    parser.add_argument("--quota", type=float,
                        help="scaleout-quota: the fraction of a core each worker group may "
                             f"use (default {scaleout.QUOTA_CORES})")
    parser.add_argument("--postgres-share", action="store_true",
                        help="scaleout-quota: run the benchmark's Postgres server in a cgroup "
                             "of high weight (a server of its own only: refused when it "
                             "holds other databases)")
    parser.add_argument("--jobs", type=int,
                        help=f"scaleout-quota: the backlog (default {scaleout.QUOTA_JOBS:,})")
    parser.add_argument("--search-options", metavar="expression,trigram",
                        help="the search scenario's older options too, for comparison: the "
                             "GIN expression index of migration 0008, a pg_trgm index")
    parser.add_argument("--search-events", type=int,
                        help="events loaded by the search scenario (default 1,000,000; "
                             "--smoke 20,000)")
    parser.add_argument("--peers", default="",
                        help="peers: the folder of the peers measured beside the product "
                             "(default $BENCH_PEERS, else ../shared/peers next to the "
                             "repository)")
    parser.add_argument("--wave-commits", default="", metavar="A,B,C",
                        help="wave: the checkouts, oldest first (`tree`: the working tree; "
                             "default the wave's commits and the working tree)")
    parser.add_argument("--wave-rounds", type=int,
                        help=f"wave: rounds, each in the order opposite the last's (default "
                             f"{wave.ROUNDS}, --smoke {wave.SMOKE_ROUNDS})")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--tag", default="",
                        help="save to results/history/ as DATE-COMMIT-TAG.* instead of "
                             "latest.* (e.g. ab-before-1)")
    parser.add_argument("--keep-database", action="store_true")
    parser.add_argument("--code", default=str(stack.ROOT),
                        help="measure the processes of another checkout (a before/after run)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
