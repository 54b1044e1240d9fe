"""Printing, saving (JSON, CSV) and charting the results, and the tables of results/README.md.

A full run is kept as results/latest.* ; the run it replaces, and every other run, lives in
results/history/ as DATE-COMMIT[-WHAT].* (the date the run started, the commit of the code
measured). `python -m benchmarks.report` rewrites the README's tables from these files.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
LATEST = "latest"
HISTORY = "history"
# Every file a run writes is STEM + one of these.
ARTEFACTS = (".json", "-sweep.csv", "-servers.csv", "-ingest-concurrency.png", "-growth.csv",
             "-growth.png")
TABLE_START = "<!-- table:start: written by `python -m benchmarks.report` -->"
TABLE_END = "<!-- table:end -->"
_HISTORY_NAME = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})-(?P<commit>[0-9a-f]{7,40}(?:-dirty)?|unknown)"
    r"(?:-(?P<what>.+))?$")


def print_scenario(name: str, result: Any, targets: Mapping[str, float]) -> None:
    printers: dict[str, Callable[[Any, Mapping[str, float]], None]] = {
        "ingest": _print_ingest, "worker": _print_worker, "e2e": _print_e2e,
        "sweep": _print_sweep, "servers": lambda result, targets: None}
    printers[name](result, targets)
    sys.stdout.flush()


def _print_ingest(result: dict[str, Any], targets: Mapping[str, float]) -> None:
    app, ref = result["app"], result["pgbench"]
    print(f"ingest  {app['connections']} connections, {app['seconds']} s, {app['tool']} "
          f"(load {result['load_average']})")
    print(f"  app      {app['rps']:9.1f} acked/s  p50 {app['p50_ms']:6.2f} ms  "
          f"p99 {app['p99_ms']:6.2f} ms  errors {app['errors']}  "
          f"rows {result['rows_recorded']}  web CPU {app['web_cpu_ms_per_ack']} ms/ack")
    if ref:
        print(f"  pgbench  {ref['tps']:9.1f} tx/s     p50 {ref['p50_ms']:6.2f} ms  "
              f"p99 {ref['p99_ms']:6.2f} ms  (ingest.sql, {ref['clients']} clients)")
        print(f"  ratio app/pgbench {result['ratio']}")
    print(f"  target: >= {targets['ingest_rps']} acked/s, p99 <= {targets['ingest_p99_ms']} ms")
    print(f"  idle web CPU {result['idle_cpu_percent']} % of a core")
    _print_memory(result["memory"])


def _print_worker(result: dict[str, Any], targets: Mapping[str, float]) -> None:
    app, ref = result["app"], result["pgbench"]
    print(f"worker  {app['jobs']} invoice jobs, concurrency {app['concurrency']}, "
          f"batch {app['batch']} (load {result['load_average']})")
    print(f"  app      {app['jobs_per_s']:9.1f} jobs/s  drained in {app['seconds']} s, "
          f"worker CPU {app['worker_cpu_ms_per_job']} ms/job "
          f"(emails all sent after {app['emails_sent_after_s']} s)")
    if ref:
        print(f"  pgbench  {ref['units_per_s']:9.1f} jobs/s  ({ref['tps']} tx/s of "
              f"{ref['jobs_per_transaction']} job(s), p99 {ref['p99_ms']} ms, worker.sql, "
              f"{ref['clients']} clients)")
        print(f"  ratio app/pgbench {result['ratio']}")
    print(f"  target: >= {targets['worker_jobs_per_s']} jobs/s")
    print(f"  idle worker CPU {result['idle_cpu_percent']} % of a core "
          f"(target < {targets['idle_cpu_percent']})")
    _print_memory(result["memory"])


def _print_e2e(result: dict[str, Any], targets: Mapping[str, float]) -> None:
    print("end to end: acknowledged -> applied (the job's done mark, jobs.finished_at)")
    for row in result["rates"].values():
        print(f"  {row['rate']:4d}/s  achieved {row['achieved_rate']}/s  "
              f"delay p50 {row['delay']['p50_ms']} ms p99 {row['delay']['p99_ms']} ms  "
              f"ack p50 {row['ack']['p50_ms']} ms p99 {row['ack']['p99_ms']} ms  "
              f"errors {row['errors']} not applied {row['not_applied']} "
              f"(load {row['load_average']})")
        print(f"         CPU per event: web {row['web_cpu_ms_per_event']} ms, "
              f"worker {row['worker_cpu_ms_per_event']} ms")
        if len(row.get("delay_p99_ms_runs", ())) > 1:
            print(f"         delay p99 of each run: {_runs(row, targets)}")
    print(f"  target: p99 <= {targets['e2e_p99_ms_at_500']} ms at 500/s in 5 of 5 runs")
    _print_memory(result["memory"])


def _print_sweep(rows: list[dict[str, Any]], targets: Mapping[str, float]) -> None:
    print("  conns      rps   p50 ms   p99 ms   pgbench tps  pgbench p99")
    for row in rows:
        print(f"  {row['connections']:5d} {row['rps']:8.1f} {row['p50_ms']:8.2f} "
              f"{row['p99_ms']:8.2f} {row.get('pgbench_tps', float('nan')):13.1f} "
              f"{row.get('pgbench_p99_ms', float('nan')):12.2f}")


def _print_memory(memory: list[dict[str, Any]]) -> None:
    parts = [f"{m['process']}/{m['role']} {m['peak_rss_mb']}" for m in memory]
    print(f"  peak RSS MB: {', '.join(parts)}")


def code_commit(code: Path) -> str:
    """The short commit of the checkout measured, with "-dirty" when its files differ from
    that commit (results/ aside: they are not the code), or "unknown" outside git."""
    try:
        head = _git(code, "rev-parse", "--short", "HEAD")
        changes = _git(code, "status", "--porcelain", "--", ".",
                       ":(exclude)benchmarks/results")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if changes else "")


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True,
                          check=True).stdout.strip()


def history_stem(results: Mapping[str, Any], what: str = "") -> str:
    """DATE-COMMIT[-WHAT]: the date the run started and the commit of the code measured."""
    date = str(results.get("started") or time.strftime("%Y-%m-%d"))[:10]
    commit = str(results.get("commit") or "unknown")
    return "-".join(part for part in (date, commit, what) if part)


def save(results: dict[str, Any], folder: Path, stem: str) -> list[Path]:
    """Write STEM.json, STEM-sweep.csv, STEM-servers.csv, STEM-growth.csv and the charts
    (those that apply)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / f"{stem}.json"]
    written[0].write_text(json.dumps(results, indent=2) + "\n")
    for key in ("sweep", "servers"):
        if results.get(key):
            path = folder / f"{stem}-{key}.csv"
            _csv(results[key], path)
            written.append(path)
    if results.get("sweep"):
        chart = _chart(results["sweep"], folder / f"{stem}-ingest-concurrency.png")
        if chart:
            written.append(chart)
    if results.get("growth"):
        path = folder / f"{stem}-growth.csv"
        _csv(results["growth"]["sizes"], path)
        written.append(path)
        chart = _growth_chart(results["growth"]["sizes"], folder / f"{stem}-growth.png")
        if chart:
            written.append(chart)
    return written


def save_to_history(results: dict[str, Any], folder: Path, what: str = "") -> list[Path]:
    """Save a run that is not the latest full run into FOLDER/history/."""
    history = folder / HISTORY
    return save(results, history, free_stem(history, history_stem(results, what)))


def save_tool_run(module: str, argv: list[str] | None, what: str,
                  fields: dict[str, Any]) -> list[Path]:
    """Save the run of a separate tool (`python -m benchmarks.MODULE ARGV`) to
    results/history/DATE-COMMIT-WHAT.json: when it started, the code measured, its command
    line and the machine's cores before its own fields. Prints where it went."""
    results = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "commit": code_commit(RESULTS.parents[1]),
               "command": " ".join(["python", "-m", f"benchmarks.{module}",
                                    *(argv if argv is not None else sys.argv[1:])]),
               "cores": os.cpu_count(), **fields}
    written = save_to_history(results, RESULTS, what)
    print(f"wrote {', '.join(str(path) for path in written)}")
    return written


def retire_latest(folder: Path) -> list[Path]:
    """Move latest.* into history/, named by the date and commit inside latest.json."""
    latest = folder / f"{LATEST}.json"
    if not latest.exists():
        return []
    results = json.loads(latest.read_text())
    if not results.get("commit"):  # written before runs recorded it: the commit that added it
        try:
            results["commit"] = _git(folder, "log", "-1", "--format=%h", "--", latest.name)
        except (OSError, subprocess.CalledProcessError):
            pass
    history = folder / HISTORY
    history.mkdir(parents=True, exist_ok=True)
    stem = free_stem(history, history_stem(results))
    moved = []
    for suffix in ARTEFACTS:
        source = folder / f"{LATEST}{suffix}"
        if source.exists():
            moved.append(source.rename(history / f"{stem}{suffix}"))
    return moved


def free_stem(folder: Path, stem: str) -> str:
    """STEM, or STEM-2, STEM-3... when a file of that name is already there."""
    candidate, number = stem, 1
    while any((folder / f"{candidate}{suffix}").exists() for suffix in ARTEFACTS):
        number += 1
        candidate = f"{stem}-{number}"
    return candidate


def _csv(rows: list[dict[str, Any]], path: Path) -> None:
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _chart(rows: list[dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no chart")
        return None
    connections = [row["connections"] for row in rows]
    figure, throughput = plt.subplots(figsize=(8, 4.5))
    throughput.plot(connections, [row["rps"] for row in rows], "o-", color="tab:blue",
                    label="webhooks web: acked/s")
    if all("pgbench_tps" in row for row in rows):
        throughput.plot(connections, [row["pgbench_tps"] for row in rows], "s--",
                        color="tab:gray", label="pgbench ingest.sql: tx/s")
    throughput.set_xscale("log", base=2)
    throughput.set_xticks(connections, [str(c) for c in connections])
    throughput.set_xlabel("concurrent connections")
    throughput.set_ylabel("throughput (per second)")
    latency = throughput.twinx()
    latency.plot(connections, [row["p99_ms"] for row in rows], "^-", color="tab:red",
                 label="webhooks web: p99 ms")
    latency.set_ylabel("p99 latency (ms)")
    handles = throughput.get_legend_handles_labels()
    more = latency.get_legend_handles_labels()
    throughput.legend(handles[0] + more[0], handles[1] + more[1], loc="upper left")
    throughput.set_title("Ingest throughput and p99 by concurrency "
                         f"(load average {rows[0].get('load_average', '?').split()[0]} "
                         f"on {os.cpu_count()} cores)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _growth_chart(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Ingest acked/s and drain jobs/s against the rows already recorded (log x)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no chart")
        return None
    sizes = [row["rows"] for row in rows]
    smallest = min((size for size in sizes if size), default=1)
    figure, (ingest, drain) = plt.subplots(1, 2, figsize=(10, 4.5))
    ingest.plot(sizes, [row["ingest_acked_per_s"] for row in rows], "o-", color="tab:blue",
                label="webhooks web: acked/s")
    if all(row.get("empty") for row in rows):  # the empty database, in the same rounds
        ingest.plot(sizes, [row["empty"]["ingest_acked_per_s"] for row in rows], "o:",
                    color="tab:cyan", label="the same, empty database beside")
    if all(row.get("pgbench_tps") for row in rows):
        ingest.plot(sizes, [row["pgbench_tps"] for row in rows], "s--", color="tab:gray",
                    label="pgbench ingest.sql: tx/s")
    ingest.set_title("Ingest")
    drain.plot(sizes, [row["drain_jobs_per_s"] for row in rows], "o-", color="tab:green",
               label=f"one worker group: jobs/s ({_n(rows[0]['drain_jobs'])} jobs)")
    drain.set_title("Drain")
    for panel in (ingest, drain):
        # linear below the smallest history, so that the empty database has a place
        panel.set_xscale("symlog", linthresh=smallest)
        panel.set_xlabel("events and jobs already recorded")
        panel.set_ylabel("per second")
        panel.set_ylim(bottom=0)
        panel.legend(loc="best")
    figure.suptitle("Ingest and drain against history "
                    f"(load average {rows[0].get('ingest_load_average', '?').split()[0]} "
                    f"at the start, on {os.cpu_count()} cores)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def server_candidates() -> dict[str, tuple[list[str], dict[str, str]]]:
    """Server command lines (with $PORT) and their environment, for `--only servers`."""
    import tempfile

    granian = str(Path(sys.executable).with_name("granian"))
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    metrics = {"PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix="bench-metrics-")}
    candidates: dict[str, tuple[list[str], dict[str, str]]] = {}
    for workers, threads in ((2, 1), (3, 1), (2, 4), (3, 4), (4, 2)):
        kind = "sync" if threads == 1 else "gthread"
        candidates[f"gunicorn {kind} w{workers}x{threads}"] = (
            [gunicorn, "--worker-class", kind, "--workers", str(workers), "--threads",
             str(threads), "--bind", "127.0.0.1:$PORT", "webhooks.ingest.server:app()"], metrics)
    for workers, threads in ((1, 8), (2, 1), (2, 2), (2, 4), (2, 8), (3, 2), (3, 4), (4, 1),
                             (4, 4)):
        candidates[f"granian wsgi w{workers}x{threads}"] = (
            [granian, "--interface", "wsgi", "--factory", "--host", "127.0.0.1",
             "--port", "$PORT", "--workers", str(workers), "--blocking-threads", str(threads),
             "--no-ws", "--log-level", "warning", "webhooks.ingest.server:app"], metrics)
    wanted = os.environ.get("BENCH_SERVERS")  # a regular expression, to run a few
    return {k: v for k, v in candidates.items() if not wanted or re.search(wanted, k)}


# --- results/README.md ----------------------------------------------------------------


def write_readme(folder: Path = RESULTS) -> bool:
    """Rewrite the tables between the README's markers; False when they were current."""
    readme = folder / "README.md"
    text = readme.read_text()
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"{readme}: no {TABLE_START} ... {TABLE_END} markers")
    head = text[:start + len(TABLE_START)]
    new = f"{head}\n{render_tables(folder)}\n{text[end:]}"
    if new == text:
        return False
    readme.write_text(new)
    return True


def render_tables(folder: Path = RESULTS) -> str:
    """Markdown: the latest run, figure by figure, then one line per run in history/."""
    parts = []
    latest = folder / f"{LATEST}.json"
    if latest.exists():
        parts.append(_latest_table(json.loads(latest.read_text()), folder))
    if found := _newest_with(folder, "scaleout"):
        parts.append(_scaleout_table(*found, folder))
    if found := _newest_with(folder, "scaleout-quota"):
        parts.append(_scaleout_quota_table(*found, folder))
    if found := _newest_with(folder, "growth"):
        parts.append(_growth_table(*found, folder))
    if found := _newest_with(folder, "retention"):
        parts.append(_retention_table(*found, folder))
    if found := _newest_with(folder, "audit"):
        parts.append(_audit_table(*found, folder))
    if found := _newest_with(folder, "kit"):
        parts.append(_kit_table(*found, folder))
    if found := _newest_with(folder, "calls"):
        parts.append(_calls_table(*found, folder))
    if found := _newest_with(folder, "peers"):
        parts.append(_peers_table(*found, folder))
    if found := _newest_with(folder, "wave"):
        parts.append(_wave_table(*found, folder))
    parts.append(_history_table(folder))
    return "\n\n".join(parts)


def _newest_with(folder: Path, scenario: str) -> tuple[dict[str, Any], Path] | None:
    """The run (latest.json or history/) that measured `scenario` last, not a smoke run."""
    runs = []
    for path in [folder / f"{LATEST}.json", *sorted((folder / HISTORY).glob("*.json"))]:
        if path.exists():
            run = json.loads(path.read_text())
            if (run.get(scenario) and not run.get("smoke")
                    and "skipped" not in run[scenario]):
                runs.append((str(run.get("started", "")), path.name, run, path))
    if not runs:
        return None
    _, _, run, path = max(runs, key=lambda item: (item[0], item[1]))
    return run, path


def _relative(path: Path, folder: Path) -> str:
    return path.relative_to(folder).as_posix() if path.is_relative_to(folder) else path.name


def _run_line(run: dict[str, Any]) -> str:
    started = str(run.get("started", "?")).replace("T", " ")[:16]
    return (f"Started {started}, code {run.get('commit', 'not recorded')}, "
            f"{run.get('cores', '?')} cores, load average {run.get('load_average_start', '?')} "
            f"at the start, {run.get('load_average_end', '?')} at the end.")


def _scaleout_table(run: dict[str, Any], path: Path, folder: Path) -> str:
    """Jobs/s and CPU per job of 1, 2 and 3 worker groups draining the same backlog."""
    result = run["scaleout"]
    name = _relative(path, folder)
    lines = [f"### Scale-out: [`{name}`]({name})", "", _run_line(run), "",
             f"{_n(result['jobs'])} invoice jobs drained by N `webhooks worker` groups side by "
             f"side (each of concurrency {result['concurrency_per_group']}). CPU is per job, "
             "in ms, with the cores it kept busy on average in brackets; Postgres: the "
             "benchmark database's backends + the server's own processes; machine: every "
             "process on it, other work included.", "",
             "| groups | jobs/s | ratio to 1 | workers CPU | Postgres CPU | Redis CPU | "
             "cores busy: measured / machine | commits per job |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in result["groups"]:
        ratio = result["ratios"].get(f"{row['groups']}_over_1")
        target = (f" (target >= {result['target_2_over_1']})" if row["groups"] == 2 else "")
        lines.append(
            f"| {row['groups']} | {_n(row['jobs_per_s'])} | "
            f"{_fixed3(ratio) if ratio is not None else '1'}{target} | "
            f"{_cpu_cell(row, 'workers')} | "
            f"{_cpu_cell(row, 'postgres_backends', 'postgres_background')} | "
            f"{_cpu_cell(row, 'redis')} | "
            f"{row['measured_cores']} / {row['machine_busy_cores']} | "
            f"{_fixed3(row.get('commits_per_job'))} |")
    return "\n".join(lines)


def _scaleout_quota_table(run: dict[str, Any], path: Path, folder: Path) -> str:
    """The same drains with each worker group held to a fraction of a core by its cgroup."""
    result = run["scaleout-quota"]
    name = _relative(path, folder)
    lines = [f"### Scale-out, CPU quotas: [`{name}`]({name})", "", _run_line(run), "",
             f"{_n(result['jobs'])} invoice jobs drained by N `webhooks worker` groups side by "
             f"side (each of concurrency {result['concurrency_per_group']}), each group in a "
             f"cgroup of its own allowed {result['quota_cores']} of a core "
             f"(`cpu.cfs_quota_us` {round(result['quota_cores'] * result['quota_period_us'])} "
             f"per {result['quota_period_us']}), Postgres {result['postgres']}. CPU as in the "
             "table above; throttled: the share of the groups' 100 ms periods in which the "
             "quota stopped them; Postgres waits: the benchmark database's active backends "
             "on average, waiting on a lock / an LWLock / IO, beside those on CPU.", "",
             "| groups | jobs/s | ratio to 1 | workers CPU | Postgres CPU | throttled | "
             "cores busy: measured / machine | commits per job | Postgres waits: "
             "Lock / LWLock / IO (on CPU) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in result["groups"]:
        ratio = result["ratios"].get(f"{row['groups']}_over_1")
        target = (f" (target >= {result['target_2_over_1']})" if row["groups"] == 2 else "")
        waits = row["postgres_waits"]["by_kind"]
        lines.append(
            f"| {row['groups']} | {_n(row['jobs_per_s'])} | "
            f"{_fixed3(ratio) if ratio is not None else '1'}{target} | "
            f"{_cpu_cell(row, 'workers')} | "
            f"{_cpu_cell(row, 'postgres_backends', 'postgres_background')} | "
            f"{row['throttled_share']:.0%} | "
            f"{row['measured_cores']} / {row['machine_busy_cores']} | "
            f"{_fixed3(row.get('commits_per_job'))} | "
            + " / ".join(f"{waits.get(kind, 0):.2f}" for kind in ("Lock", "LWLock", "IO"))
            + f" ({waits.get('running', 0):.2f}) |")
    return "\n".join(lines)


def _cpu_cell(row: dict[str, Any], *parts: str) -> str:
    per_job = [row.get(f"{part}_cpu_ms_per_job") for part in parts]
    cores = [row.get(f"{part}_cores") for part in parts]
    if any(value is None for value in per_job + cores):
        return ""
    return f"{sum(per_job):.3f} ({sum(cores):.2f})"  # type: ignore[arg-type]


def _growth_table(run: dict[str, Any], path: Path, folder: Path) -> str:
    """Ingest and drain rates against the rows already in webhook_events and jobs (and,
    since the tables are partitioned, each against the empty database)."""
    result = run["growth"]
    plan = result["plan"]
    ratios = result.get("ratios", {})
    name = _relative(path, folder)
    rounds = f", median of {plan['rounds']} rounds" if plan.get("rounds", 1) > 1 else ""
    lines = [f"### Growth: [`{name}`]({name})", "", _run_line(run), "",
             f"Ingest: {result['connections']} connections for {plan['ingest_seconds']} s"
             f"{rounds}, beside pgbench running ingest.sql as long. Drain: "
             f"{_n(plan['backlog'])} invoice jobs, one `webhooks worker` group. CPU in ms per "
             "delivery or job. In brackets: the ratio to the empty database (targets for the "
             "ingest: rate >= 0.9, p99 <= 1.2).", "",
             "| rows already there | events MB | dedup MB | acked/s | p99 ms | pgbench tx/s | "
             "web / Postgres CPU per delivery | drain jobs/s | worker / Postgres CPU per job |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in result["sizes"]:
        ratio = ratios.get(str(row["rows"]), {})
        lines.append(
            f"| {_n(row['rows'])} | {_n(row['events_mb'])} | {_n(row.get('dedup_mb'))} | "
            f"{_n(row['ingest_acked_per_s'])}{_bracket(ratio.get('ingest_rate_vs_empty'))} | "
            f"{_ms(row['ingest_p99_ms'])}{_bracket(ratio.get('ingest_p99_vs_empty'))} | "
            f"{_n(row.get('pgbench_tps'))}{_bracket(ratio.get('pgbench_vs_empty'))} | "
            f"{_fixed3(row['ingest_web_cpu_ms_per_ack'])} / "
            f"{_fixed3(row.get('ingest_postgres_cpu_ms_per_ack'))} | "
            f"{_n(row['drain_jobs_per_s'])}{_bracket(ratio.get('drain_vs_empty'))} | "
            f"{_fixed3(row['drain_worker_cpu_ms_per_job'])} / "
            f"{_fixed3(row.get('drain_postgres_cpu_ms_per_job'))} |")
    chart = path.with_name(f"{path.stem}-growth.png")
    if chart.exists():
        lines += ["", f"![ingest and drain against history]({_relative(chart, folder)})"]
    return "\n".join(lines)


def _bracket(ratio: float | None) -> str:
    return "" if ratio is None else f" ({ratio:.2f})"


def _retention_table(run: dict[str, Any], path: Path, folder: Path) -> str:
    """Retention by dropped days against the previous release's row deletes
    (benchmarks/retention.py), the ingest beside a prune, and the dedup keys' bytes."""
    result = run["retention"]
    drop, rows, ratios = result["drop"], result["row_deletes"], result["ratios"]
    ingest, nightly, dedup = result["ingest"], result["nightly"], result["dedup"]
    name = _relative(path, folder)
    vacuum = rows["vacuum"]
    lines = [f"### Retention: [`{name}`]({name})", "", _run_line(run), "",
             f"One day of {_n(drop['events'])} done Stripe-shaped events (with their jobs, "
             "search documents and dedup keys), removed by `partitions.prune` (the day's "
             "partitions detached and dropped) and, made again, by the previous release's "
             f"statement in transactions of {_n(rows['batch'])} rows; each right after a "
             f"CHECKPOINT. WAL: the {result['wal_read_as']}'s (pg_walinspect), the server's "
             "in brackets.", "",
             "| removal | seconds | WAL bytes | WAL bytes per event | ÷ drop: seconds / WAL |",
             "| --- | ---: | ---: | ---: | ---: |",
             f"| drop | {drop['seconds']:.3f} | {_n(drop['wal']['bytes'])} "
             f"({_n(drop['wal']['server_bytes'])}) | {drop['wal_bytes_per_event']} | 1 / 1 |",
             f"| row deletes | {rows['seconds']:.3f} | {_n(rows['wal']['bytes'])} "
             f"({_n(rows['wal']['server_bytes'])}) | {rows['wal_bytes_per_event']} | "
             f"{_n(ratios['seconds_rows_over_drop'])} / {_n(ratios['wal_rows_over_drop'])} |",
             f"| the VACUUM the row deletes leave | {vacuum['seconds']:.3f} | "
             f"{_n(vacuum['wal']['bytes'])} ({_n(vacuum['wal']['server_bytes'])}) | "
             f"{_per_event(vacuum['wal']['bytes'], rows['events'])} | "
             f"WAL with the deletes: {_n(ratios['wal_rows_and_vacuum_over_drop'])} |", "",
             f"The ingest beside a prune of that day: {ingest['rate']} deliveries a second "
             "through `record_event` (the latency from when each was due), "
             f"{ingest['threads']} threads; the prune took {ingest['prune_seconds']:.3f} s.", "",
             "| window | deliveries | p50 ms | p99 ms | max ms |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for label, window in (("without a prune", ingest["without_prune"]),
                          ("during the prune", ingest["during_prune"])):
        lines.append(f"| {label} | {_n(window.get('deliveries'))} | {_ms(window.get('p50_ms'))} "
                     f"| {_ms(window.get('p99_ms'))} | {_ms(window.get('max_ms'))} |")
    lines += ["", f"p99 during ÷ without: {_fixed3(ingest['p99_during_over_without'])}. "
              f"The nightly shape (the day {nightly['day']} straddling the cutoff, "
              f"{_n(nightly['events'])} events, {_n(nightly['past_cutoff'])} of them past it): "
              f"the prune removed {_n(nightly['removed'])} row by row in "
              f"{nightly['seconds']:.3f} s, WAL {_n(nightly['wal']['bytes'])} bytes. "
              f"Dedup keys: {_n(dedup['rows'])} in webhook_dedup, "
              f"{dedup['bytes_per_event']} bytes each with its indexes (heap "
              f"{dedup['heap_bytes_per_event']}; "
              + ", ".join(f"`{index}` {size}" for index, size in dedup["indexes"].items())
              + f"), against the previous release's {dedup['previous_bytes_per_event']} in "
              f"its unique indexes: {_fixed3(dedup['over_previous'])}."]
    return "\n".join(lines)


def _per_event(amount: float | None, events: int) -> str:
    return "" if amount is None or not events else f"{amount / events:.1f}"


def _audit_table(run: dict[str, Any], path: Path, folder: Path) -> str:
    """`webhooks audit` on a large database (benchmarks/audit.py): seconds per check."""
    result = run["audit"]
    name = _relative(path, folder)
    rows = run["fill"]["rows"]
    names = list(result["all"]["checks"])
    lines = [f"### Audit: [`{name}`]({name})", "", _run_line(run), "",
             f"`webhooks audit` on {_n(rows['webhook_events'])} events, "
             f"{_n(rows['ledger_entries'])} ledger entries, {_n(rows['accounts'])} accounts, "
             f"{_n(rows['outbox'])} emails, in seconds (target: within 60 s at 200,000 "
             "events).", "",
             "| run | total | " + " | ".join(names) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in names) + " |"]
    for label in ("all", "since_1_day"):
        checks = result[label]["checks"]
        lines.append(f"| {label.replace('_', ' ')} | {_fixed3(result[label]['seconds'])} | "
                     + " | ".join(_fixed3(checks.get(n)) for n in names) + " |")
    return "\n".join(lines)


def _kit_table(run: dict[str, Any], path: Path, folder: Path) -> str:
    """The test kit's check (benchmarks/kit.py): seconds per app against the SPEC's bound."""
    result = run["kit"]
    name = _relative(path, folder)
    lines = [f"### Test kit: [`{name}`]({name})", "", _run_line(run), "",
             f"`webhooks check-handlers`'s check of {result['events']} events under "
             f"{result['schedules']} schedules (seed {result['seed']}), in seconds: the check "
             "(the reference and the schedules, until the first that fails and its shrinking), "
             "and the whole (the kit's database created and migrated, the check, the database "
             f"dropped). Bound: {result['bound_seconds']:.0f} s for the whole.", "",
             "| app | left out | verdict | check | whole | per schedule |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    for app in result["apps"]:
        lines.append(f"| {app['name']} (`{app['app']}`) | {', '.join(app['ignore'])} | "
                     f"{'ok' if app['ok'] else 'failed'} | {app['check_seconds']:.2f} | "
                     f"{app['whole_seconds']:.2f} | {_fixed3(app['per_schedule_seconds'])} |")
    return "\n".join(lines)


def _calls_table(run: dict[str, Any], path: Path, folder: Path) -> str:
    """Calls to other APIs (benchmarks/calls.py): the worker's CPU per job whose handler
    queues a call against an email's, and the call dispatch's rate against the outbox's."""
    result = run["calls"]
    worker, dispatched = result["worker"], result["dispatch"]
    name = _relative(path, folder)
    budget = dispatched.get("stripe_budget_per_s")
    lines = [f"### Calls to other APIs: [`{name}`]({name})", "", _run_line(run), "",
             f"The worker's batches (`worker.jobs.process_batch` in one process) over "
             f"{_n(worker['jobs'])} jobs whose handler queues nothing, one email or one call "
             "(a Stripe refund), CPU of that process per job, median of "
             f"{worker['rounds']} rounds. Above nothing, a call costs "
             f"{worker['call_above_nothing_us']:.1f} µs and an email "
             f"{worker['email_above_nothing_us']:.1f} µs (÷ "
             f"{_fixed3(worker['call_over_email_above_nothing'])}).", "",
             "| handler queues | worker CPU µs per job | jobs/s | ÷ email |",
             "| --- | ---: | ---: | ---: |"]
    email_cpu = worker["kinds"]["email"]["cpu_us_per_job"]
    for kind, figures in worker["kinds"].items():
        lines.append(f"| {'one ' + kind if kind != 'nothing' else 'nothing'} | "
                     f"{figures['cpu_us_per_job']:.1f} | {_n(figures['jobs_per_s'])} | "
                     f"{_fixed3(figures['cpu_us_per_job'] / email_cpu)} |")
    lines += ["", "The dispatch in one process, by one then two threads: calls by "
              "`worker.calls.dispatch_due` to the fake Stripe API (one request each"
              + (f", within the process's Stripe budget of {budget:g} requests a second, "
                 "and with that budget lifted: the dispatch's own rate" if budget else "")
              + "), emails by `worker.outbox.dispatch_due` to the fake Postmark (up to "
              f"{dispatched['emails_per_request']} a request); each fake in a process of its "
              f"own. Median of {dispatched['rounds']} rounds; CPU of the dispatching process "
              "per item.", "",
              "| dispatch | items | threads | sent/s | CPU µs per item | sent/s ÷ emails' | "
              "CPU ÷ emails' | 2 threads ÷ 1 |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ratios = dispatched["ratios"]
    for row in dispatched["rows"]:
        kind, threads = row["kind"], row["threads"]
        lines.append(
            f"| {row['label']} | {_n(row['items'])} | {threads} | {_rate(row['per_s'])} | "
            f"{row['cpu_us_per_item']:.1f} | "
            f"{_fixed3(ratios.get(f'{kind}_over_emails_per_s_{threads}'))} | "
            f"{_fixed3(ratios.get(f'{kind}_over_emails_cpu_{threads}'))} | "
            f"{_fixed3(ratios.get(f'{kind}_2_over_1')) if threads == 2 else ''} |")
    return "\n".join(lines)


def _peers_table(run: dict[str, Any], path: Path, folder: Path) -> str:
    """The product beside its peers (benchmarks/peers.py): each run of each side, alternated,
    and the ratio of the medians against its target."""
    result = run["peers"]
    name = _relative(path, folder)
    lines = [f"### Peers: [`{name}`]({name})", "", _run_line(run)]
    node, worker = result.get("node", {}), result.get("procrastinate", {})
    if "skipped" in node:
        lines += ["", f"seed-node: skipped ({node['skipped']})."]
    elif node:
        lines += ["", f"`webhooks web` and the seed guide's Node/Express handler (seed-node, "
                  f"node {node['node']}) under the ingest scenario's load: {node['tool']}, "
                  f"{node['connections']} connections, {node['seconds']:g} s, signed unique "
                  f"Stripe `{node['event_type']}` events; runs alternated, no worker, each on "
                  "a database of its own on the same Postgres. Kept: seed-node's completed "
                  "`processed_webhooks` rows, the product's jobs; missing: acknowledged but "
                  "not kept (warm-up included).", "",
                  "| server | run | acks/s | p50 ms | p99 ms | CPU ms per ack | not 2xx | "
                  "kept | missing |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                  "| ---: |"]
        for row in node["runs"]:
            lines.append(f"| {'webhooks web' if row['side'] == 'product' else 'seed-node'} | "
                         f"{row['run']} | {_n(row['rps'])} | {_ms(row['p50_ms'])} | "
                         f"{_ms(row['p99_ms'])} | {_fixed3(row['web_cpu_ms_per_ack'])} | "
                         f"{row['errors']} | {_n(row['kept'])} | {row['missing']} |")
        lines += ["", f"Medians: {_n(node['product_rps'])} ÷ {_n(node['node_rps'])} acks/s = "
                  f"**{_fixed3(node['ratio'])}** (target >= {node['target']})."]
    if "skipped" in worker:
        lines += ["", f"procrastinate: skipped ({worker['skipped']})."]
    elif worker:
        options = " ".join(worker["worker_args"]) or "its defaults"
        lines += ["", f"`webhooks worker` ({options}) and one procrastinate "
                  f"{worker['procrastinate']} worker process, both at concurrency "
                  f"{worker['concurrency']} (the product's processes times threads), draining the "
                  f"same {_n(worker['jobs'])} invoice jobs, alternated. The product's time "
                  "starts at the sweep after its worker is ready; procrastinate's at its "
                  "worker's start (start-up to its first job done in brackets).", "",
                  "| worker | run | jobs/s | seconds | outcome |",
                  "| --- | ---: | ---: | ---: | --- |"]
        for row in worker["runs"]:
            product = row["side"] == "product"
            start_up = "" if product else f" ({row['first_done_s']:.2f})"
            lines.append(f"| {'webhooks worker' if product else 'procrastinate'} | "
                         f"{row['run']} | {_n(row['jobs_per_s'])} | {row['seconds']:.2f}"
                         f"{start_up} | {'done' if product else row['outcome']} |")
        lines += ["", f"Medians: {_n(worker['product_jobs_per_s'])} ÷ "
                  f"{_n(worker['procrastinate_jobs_per_s'])} jobs/s = "
                  f"**{_fixed3(worker['ratio'])}** (target >= {worker['target']})."]
    return "\n".join(lines)


def _wave_table(run: dict[str, Any], path: Path, folder: Path) -> str:
    """Each checkout of the wave (benchmarks/wave.py), medians over alternated rounds, and
    each change's after ÷ before."""
    result = run["wave"]
    name = _relative(path, folder)
    changes = {change["after"]: change for change in result["changes"]}
    lines = [f"### The wave, before and after: [`{name}`]({name})", "", _run_line(run), "",
             f"Each checkout's ingest (`webhooks web`, {result['connections']} connections, "
             f"{result['ingest_seconds']:g} s) and drain ({_n(result['worker_jobs'])} invoice "
             f"jobs), medians of {result['rounds']} rounds in alternated order. A change's "
             "ratios: its checkout's figure ÷ the row above's.", "",
             "| commit | change | acks/s | p99 ms | web CPU ms per ack | jobs/s | "
             "worker CPU ms per job | acks/s ÷ before | p99 ÷ before | jobs/s ÷ before |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in result["commits"]:
        change = changes.get(row["commit"], {})
        if "rps" not in row:
            lines.append(f"| {row['commit']} | {row['change']} | "
                         f"{row.get('error', 'not measured')} |  |  |  |  |  |  |  |")
            continue
        lines.append(
            f"| {row['commit']} | {row['change']} | {_n(row['rps'])} | {_ms(row['p99_ms'])} | "
            f"{_fixed3(row['web_cpu_ms_per_ack'])} | {_n(row['jobs_per_s'])} | "
            f"{_fixed3(row['worker_cpu_ms_per_job'])} | "
            f"{_fixed3(change.get('rps_after_over_before'))} | "
            f"{_fixed3(change.get('p99_ms_after_over_before'))} | "
            f"{_fixed3(change.get('jobs_per_s_after_over_before'))} |")
    return "\n".join(lines)


def _latest_table(run: dict[str, Any], folder: Path) -> str:
    started = str(run.get("started", "?")).replace("T", " ")[:16]
    lines = [f"### Latest: [`{LATEST}.json`]({LATEST}.json)", "",
             f"Started {started}, code {run.get('commit', 'not recorded')}, "
             f"{run.get('cores', '?')} cores, load average {run.get('load_average_start', '?')} "
             f"at the start, {run.get('load_average_end', '?')} at the end.", "",
             "| figure | measured | target |", "| --- | --- | --- |"]
    lines += [f"| {figure} | {value} | {target} |"
              for figure, value, target in _figures(run)]
    if run.get("sweep"):
        lines += ["", _sweep_table(run["sweep"])]
        chart = folder / f"{LATEST}-ingest-concurrency.png"
        if chart.exists():
            lines += ["", f"![ingest throughput and p99 by concurrency]({chart.name})"]
    return "\n".join(lines)


def _figures(run: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    targets = run.get("targets", {})
    if ingest := run.get("ingest"):
        app, ref = ingest["app"], ingest.get("pgbench")
        where = f"ingest, {app['connections']} connections ({app['tool']}, {app['seconds']} s)"
        yield (f"{where}: acked/s", _n(app["rps"]), _at_least(targets.get("ingest_rps")))
        yield ("ingest latency p50 / p99", f"{_ms(app['p50_ms'])} / {_ms(app['p99_ms'])} ms",
               _at_most(targets.get("ingest_p99_ms"), "p99", "ms"))
        if ref:
            yield (f"pgbench, ingest.sql, {ref['clients']} clients: tx/s; p50 / p99",
                   f"{_n(ref['tps'])}; {_ms(ref['p50_ms'])} / {_ms(ref['p99_ms'])} ms", "")
            yield ("ingest ratio to pgbench", _fixed3(ingest['ratio']),
                   _at_least_ratio(targets.get("ingest_over_pgbench")))
        if app.get("web_cpu_ms_per_ack") is not None:
            yield ("web CPU per delivery", f"{app['web_cpu_ms_per_ack']} ms", "")
        yield ("ingest errors; rows recorded",
               f"{app['errors']}; {_n(ingest.get('rows_recorded', 0))}", "")
        yield ("idle web CPU", f"{ingest['idle_cpu_percent']}% of a core", "")
        yield ("web peak RSS per process", _memory(ingest.get("memory", [])), "")
    if sweep := run.get("sweep"):
        best = max(sweep, key=lambda row: row["rps"])
        yield ("ingest sweep, best acked/s", f"{_n(best['rps'])} at {best['connections']} "
               f"connections (p99 {_ms(best['p99_ms'])} ms)", "")
    if worker := run.get("worker"):
        app, ref = worker["app"], worker.get("pgbench")
        yield (f"worker, {_n(app['jobs'])} invoice jobs (concurrency {app['concurrency']}, "
               f"batch {app['batch']}): jobs/s",
               f"{_n(app['jobs_per_s'])} (drained in {app['seconds']} s)",
               _at_least(targets.get("worker_jobs_per_s")))
        if ref:
            yield (f"pgbench, worker.sql, {ref['clients']} clients, "
                   f"{ref.get('jobs_per_transaction', 1)} jobs per transaction: jobs/s",
                   _n(ref["units_per_s"]), "")
            yield ("worker ratio to pgbench", _fixed3(worker['ratio']), "")
        if app.get("worker_cpu_ms_per_job") is not None:
            yield ("worker CPU per job", f"{app['worker_cpu_ms_per_job']} ms", "")
        yield ("emails all sent after", f"{app['emails_sent_after_s']} s", "")
        yield ("idle worker CPU", f"{worker['idle_cpu_percent']}% of a core",
               _at_most(targets.get("idle_cpu_percent"), "", "%", strict=True))
        yield ("worker peak RSS per process", _memory(worker.get("memory", [])), "")
    if e2e := run.get("e2e"):
        for row in e2e["rates"].values():
            rate = f"e2e {row['rate']}/s"
            target = (_at_most(targets.get("e2e_p99_ms_at_500"), "p99", "ms")
                      if row["rate"] == 500 else "")
            yield (f"{rate} (achieved {row['achieved_rate']}/s): acked to applied, p50 / p99",
                   f"{_ms(row['delay']['p50_ms'])} / {_ms(row['delay']['p99_ms'])} ms", target)
            if len(row.get("delay_p99_ms_runs", ())) > 1:
                yield (f"{rate}: acked to applied p99 of each run", _runs(row, targets),
                       "in 5 of 5 runs" if row["rate"] == 500 else "")
            yield (f"{rate}: acknowledgement p50 / p99",
                   f"{_ms(row['ack']['p50_ms'])} / {_ms(row['ack']['p99_ms'])} ms", "")
            yield (f"{rate}: CPU per event, web / worker",
                   f"{row['web_cpu_ms_per_event']} / {row['worker_cpu_ms_per_event']} ms", "")
            yield (f"{rate}: errors; not applied", f"{row['errors']}; {row['not_applied']}", "")
    peers = run.get("peers") or {}
    if (node := peers.get("node")) and "ratio" in node:
        yield ("ingest acks/s ÷ seed-node's (medians; p99 of each run: web / node)",
               f"{_fixed3(node['ratio'])} ({_n(node['product_rps'])} / {_n(node['node_rps'])}"
               f"; {', '.join(_ms(p) for p in node['product_p99_ms'])} / "
               f"{', '.join(_ms(p) for p in node['node_p99_ms'])} ms)",
               _at_least_ratio(targets.get("ingest_over_node")))
    if (worker := peers.get("procrastinate")) and "ratio" in worker:
        yield (f"worker jobs/s ÷ procrastinate's ({_n(worker['jobs'])} jobs, concurrency "
               f"{worker['concurrency']}, medians)",
               f"{_fixed3(worker['ratio'])} ({_n(worker['product_jobs_per_s'])} / "
               f"{_n(worker['procrastinate_jobs_per_s'])})",
               _at_least_ratio(targets.get("worker_over_procrastinate")))


def _runs(row: dict[str, Any], targets: Mapping[str, float]) -> str:
    """The p99 of each repeated run, and how many met the target."""
    runs = row["delay_p99_ms_runs"]
    limit = targets.get("e2e_p99_ms_at_500")
    met = sum(1 for p99 in runs if limit is not None and p99 <= limit)
    return f"{', '.join(_ms(p99) for p99 in runs)} ms ({met} of {len(runs)} <= {limit} ms)"


def _sweep_table(sweep: list[dict[str, Any]]) -> str:
    lines = ["| connections | acked/s | p50 ms | p99 ms | pgbench tx/s | pgbench p99 ms |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in sweep:
        lines.append(f"| {row['connections']} | {_n(row['rps'])} | {_ms(row['p50_ms'])} | "
                     f"{_ms(row['p99_ms'])} | {_n(row.get('pgbench_tps'))} | "
                     f"{_ms(row.get('pgbench_p99_ms'))} |")
    return "\n".join(lines)


def _history_table(folder: Path) -> str:
    runs = []
    for path in (folder / HISTORY).glob("*.json"):
        name = _HISTORY_NAME.match(path.stem)
        run = json.loads(path.read_text())
        commit = run.get("commit") or (name["commit"] if name else "?")
        what = (name["what"] if name else path.stem) or "full"
        what = f"full ({what})" if what.isdigit() else what  # a second full run: STEM-2
        runs.append((str(run.get("started", "")), commit, f"[{what}]({HISTORY}/{path.name})",
                     run))
    latest = folder / f"{LATEST}.json"
    if latest.exists():
        run = json.loads(latest.read_text())
        runs.append((str(run.get("started", "")), run.get("commit", "?"),
                     f"[latest]({latest.name})", run))
    lines = ["### All runs, oldest first", "",
             "| started | code | run | ingest acked/s (ratio) | ingest p99 ms | "
             "web CPU ms/delivery | worker jobs/s (ratio) | worker CPU ms/job | "
             "e2e p99 ms at 200/s | at 500/s | scale-out 2 / 1 groups (3 / 1) | "
             "with CPU quotas |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for started, commit, link, run in sorted(runs, key=lambda item: item[0]):
        cells = [started.replace("T", " ")[:16], commit, link, *_key_figures(run)]
        lines.append("| " + " | ".join(cells) + " |")
    others = sorted(path.name for path in (folder / HISTORY).glob("*.csv")
                    if not _written_with_json(path))
    if others:
        lines += ["", "Also in history/ (tables without a JSON run): " + ", ".join(
            f"[`{name}`]({HISTORY}/{name})" for name in others) + "."]
    return "\n".join(lines)


def _key_figures(run: dict[str, Any]) -> list[str]:
    ingest = (run.get("ingest") or {}).get("app")
    worker = (run.get("worker") or {}).get("app")
    rates = (run.get("e2e") or {}).get("rates", {})
    scaleout = (run.get("scaleout") or {}).get("ratios", {})
    quota = (run.get("scaleout-quota") or {}).get("ratios", {})
    return [f"{_n(ingest['rps'])} ({_fixed3(run['ingest']['ratio'])})" if ingest else "",
            _ms(ingest["p99_ms"]) if ingest else "",
            _fixed3(ingest.get("web_cpu_ms_per_ack")) if ingest else "",
            f"{_n(worker['jobs_per_s'])} ({_fixed3(run['worker']['ratio'])})" if worker else "",
            _fixed3(worker.get("worker_cpu_ms_per_job")) if worker else "",
            _ms(rates["200"]["delay"]["p99_ms"]) if "200" in rates else "",
            _ms(rates["500"]["delay"]["p99_ms"]) if "500" in rates else "",
            f"{_fixed3(scaleout.get('2_over_1'))} ({_fixed3(scaleout.get('3_over_1'))})"
            if scaleout else "",
            f"{_fixed3(quota.get('2_over_1'))} ({_fixed3(quota.get('3_over_1'))})"
            if quota else ""]


def _written_with_json(csv_path: Path) -> bool:
    """Whether STEM-sweep.csv, STEM-servers.csv or STEM-growth.csv is that part of the run
    in STEM.json."""
    for key in ("sweep", "servers", "growth"):
        suffix = f"-{key}.csv"
        if csv_path.name.endswith(suffix):
            run = csv_path.with_name(csv_path.name[:-len(suffix)] + ".json")
            return run.exists() and bool(json.loads(run.read_text()).get(key))
    return False


def _memory(memory: list[dict[str, Any]]) -> str:
    parts = [f"{m['process']} {m['role']} {m['peak_rss_mb']}" for m in memory]
    return ", ".join(parts) + " MB" if parts else ""


def _n(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def _ms(value: float | None) -> str:
    if value is None:
        return ""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _rate(value: float) -> str:
    """A rate: a decimal below 100 (25.9 within Stripe's budget), whole above."""
    return f"{value:.1f}" if value < 100 else _n(value)


def _fixed3(value: float | None) -> str:
    """Ratios and CPU milliseconds: three decimals."""
    return "" if value is None else f"{value:.3f}"


def _at_least(target: float | None) -> str:
    return "" if target is None else f">= {_n(target)}"


def _at_least_ratio(target: float | None) -> str:
    return "" if target is None else f">= {target:g}"


def _at_most(target: float | None, what: str, unit: str, strict: bool = False) -> str:
    if target is None:
        return ""
    sign = "<" if strict else "<="
    return f"{what} {sign} {target}{' ' if unit == 'ms' else ''}{unit}".strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.report",
        description="Rewrite the tables in results/README.md from latest.json and history/.")
    parser.add_argument("--results", default=str(RESULTS), help="the results folder")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 when the tables are out of date")
    args = parser.parse_args(argv)
    folder = Path(args.results)
    if args.check:
        readme = (folder / "README.md").read_text()
        current = f"{TABLE_START}\n{render_tables(folder)}\n{TABLE_END}" in readme
        print(f"{folder / 'README.md'}: tables {'current' if current else 'out of date'}")
        return 0 if current else 1
    changed = write_readme(folder)
    print(f"{folder / 'README.md'}: tables {'rewritten' if changed else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
