"""The peers and wave benchmarks' parts that need no servers (benchmarks/peers.py,
benchmarks/wave.py): a missing peer is skipped, not failed; procrastinate's jobs are the
worker scenario's invoices; a change's ratios are its checkout's figures over the one
before; the results README's tables are drawn from what a run saves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import __main__ as bench
from benchmarks import peers, report, scenarios, stack, wave
from benchmarks.events import CUSTOMERS


def test_without_the_peers_folder_the_scenario_is_skipped_with_the_reason(
        tmp_path: Path) -> None:
    target = stack.Target("postgresql://postgres@127.0.0.1:5432/unused", "redis://unused",
                          tmp_path)
    result = peers.run(target, scenarios.SMOKE, "postgresql://unused", tmp_path / "absent", 1)
    assert result == {"skipped": f"no peers folder at {tmp_path / 'absent'} (--peers DIR "
                                 "or BENCH_PEERS)"}


def test_the_peers_folder_is_the_option_then_the_environment_then_beside_the_repo(
        monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.delenv("BENCH_PEERS", raising=False)
    assert peers.folder(None) == (stack.ROOT.parent / "shared" / "peers").resolve()
    monkeypatch.setenv("BENCH_PEERS", str(tmp_path))
    assert peers.folder(None) == tmp_path.resolve()
    assert peers.folder(str(tmp_path / "other")) == (tmp_path / "other").resolve()


def test_procrastinates_jobs_are_the_seeded_invoices() -> None:
    jobs = peers.seeded_jobs(CUSTOMERS + 2)
    assert jobs[0] == {"customer_id": "cus_1", "currency": "usd", "amount": 1999,
                       "invoice_id": "in_seed_1", "event_id": "evt_seed_1"}
    assert jobs[-1]["customer_id"] == "cus_2"  # n % CUSTOMERS, as seed_jobs spreads them
    assert len({job["invoice_id"] for job in jobs}) == len(jobs)


def test_the_scenarios_and_their_options_are_accepted() -> None:
    args = bench._parser().parse_args(["--only", "peers", "--only", "wave", "--peers", "/p",
                                       "--wave-commits", "abc,tree", "--wave-rounds", "3"])
    assert args.only == ["peers", "wave"] and args.peers == "/p"
    assert args.wave_commits == "abc,tree" and args.wave_rounds == 3
    assert bench.TARGETS["ingest_over_node"] == 1.5
    assert bench.TARGETS["worker_over_procrastinate"] == 5
    assert [commit for commit, _ in wave.COMMITS][-1] == wave.TREE


def test_each_change_is_its_checkout_over_the_one_before() -> None:
    rows: list[dict[str, Any]] = [
        {"commit": "a", "change": "base", "rps": 1000.0, "p99_ms": 20.0, "jobs_per_s": 500.0,
         "web_cpu_ms_per_ack": 0.5, "worker_cpu_ms_per_job": 0.4},
        {"commit": "b", "change": "broken", "error": "prepare: no"},
        {"commit": "c", "change": "faster", "rps": 1500.0, "p99_ms": 10.0, "jobs_per_s": 500.0,
         "web_cpu_ms_per_ack": 0.25, "worker_cpu_ms_per_job": 0.4}]
    before_broken, after_broken = wave._changes(rows)
    assert before_broken == {"change": "broken", "before": "a", "after": "b"}
    assert after_broken == {"change": "faster", "before": "b", "after": "c"}
    (change,) = wave._changes([rows[0], rows[2]])
    assert change["rps_after_over_before"] == 1.5
    assert change["p99_ms_after_over_before"] == 0.5
    assert change["jobs_per_s_after_over_before"] == 1.0


def _run(**parts: Any) -> dict[str, Any]:
    return {"started": "2026-12-06T08:00:00", "commit": "abc1234", "cores": 2,
            "load_average_start": "1.00 1.00 1.00", "load_average_end": "1.00 1.00 1.00",
            "smoke": False, "targets": bench.TARGETS, **parts}


def _ingest_row(side: str, run: int, rps: float) -> dict[str, Any]:
    return {"side": side, "run": run, "rps": rps, "p50_ms": 5.0, "p99_ms": 20.0, "errors": 0,
            "web_cpu_ms_per_ack": 0.5, "kept": 100, "missing": 0, "tool": "wrk"}


PEERS = {"folder": "/p", "runs_per_side": 1,
         "node": {"node": "v20", "connections": 16, "seconds": 10, "tool": "wrk",
                  "event_type": "invoice.paid", "runs": [_ingest_row("product", 1, 1800),
                                                         _ingest_row("node", 1, 1200)],
                  "product_rps": 1800, "node_rps": 1200, "product_p99_ms": [20.0],
                  "node_p99_ms": [200.0], "ratio": 1.5, "target": 1.5},
         "procrastinate": {"skipped": "no /p/procrastinate"}}


def test_the_readme_shows_the_peers_ratios_against_their_targets(tmp_path: Path) -> None:
    (tmp_path / report.HISTORY).mkdir()
    (tmp_path / "latest.json").write_text(report.json.dumps(_run(peers=PEERS)))
    tables = report.render_tables(tmp_path)
    assert "| ingest acks/s ÷ seed-node's (medians; p99 of each run: web / node) | 1.500 " \
           "(1,800 / 1,200; 20.0 / 200 ms) | >= 1.5 |" in tables
    assert "### Peers: [`latest.json`](latest.json)" in tables
    assert "| seed-node | 1 | 1,200 | 5.00 | 20.0 | 0.500 | 0 | 100 | 0 |" in tables
    assert "procrastinate: skipped (no /p/procrastinate)." in tables


def test_the_readme_shows_each_change_of_the_wave(tmp_path: Path) -> None:
    (tmp_path / report.HISTORY).mkdir()
    rows: list[dict[str, Any]] = [{"commit": "a", "change": "base", "rps": 1000.0, "p99_ms": 20.0,
             "jobs_per_s": 500.0, "web_cpu_ms_per_ack": 0.5, "worker_cpu_ms_per_job": 0.4,
             "rounds": []},
            {"commit": "b", "change": "broken", "error": "prepare: no", "rounds": []}]
    result = {"commits": rows, "changes": wave._changes(rows), "rounds": 2,
              "connections": 16, "ingest_seconds": 10, "worker_jobs": 20000}
    path = tmp_path / report.HISTORY / "2026-12-06-abc1234-wave.json"
    path.write_text(report.json.dumps(_run(wave=result)))
    tables = report.render_tables(tmp_path)
    assert "| a | base | 1,000 | 20.0 | 0.500 | 500 | 0.400 |  |  |  |" in tables
    assert "| b | broken | prepare: no |" in tables
