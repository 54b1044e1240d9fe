"""The scale-out benchmark's CPU quotas (benchmarks/quota.py), on the machine's real cgroup
v1 cpu controller: a group started through Group.command() is inside its cgroup with every
process it forks, the quota holds it, and the cgroups are gone after the block, an error
included. Skipped where cgroups cannot be made (not root, no cgroup v1 cpu controller)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from benchmarks import quota

pytestmark = pytest.mark.skipif(quota.unavailable() is not None,
                                reason=str(quota.unavailable()))

# A process that forks a CPU-bound child, then waits for it.
BUSY_CHILD = ["sh", "-c", "sh -c 'while :; do :; done' & wait"]


def _children(pid: int) -> set[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return {int(line) for line in found.stdout.split()}


def test_a_group_and_what_it_forks_run_inside_their_cgroup_held_to_the_quota() -> None:
    with quota.groups(1, 0.1) as (group,):
        assert (group.path / "cpu.cfs_quota_us").read_text().strip() == "10000"
        assert (group.path / "cpu.cfs_period_us").read_text().strip() == str(quota.PERIOD_US)
        process = subprocess.Popen(group.command(BUSY_CHILD))
        try:
            deadline = time.monotonic() + 5
            while not _children(process.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            before = group.stat()
            time.sleep(1)
            after = group.stat()
            assert {process.pid, *_children(process.pid)} <= group.pids()
            assert len(group.pids()) == 2
            # a busy loop held to a tenth of a core: throttled in most periods
            periods = after["nr_periods"] - before["nr_periods"]
            throttled = after["nr_throttled"] - before["nr_throttled"]
            assert periods >= 5 and throttled >= periods * 0.8
        finally:
            for child in _children(process.pid):
                os.kill(child, signal.SIGKILL)
            process.kill()
            process.wait()
        path = group.path
    assert not path.exists()


def test_the_cgroups_are_removed_when_the_block_fails() -> None:
    with pytest.raises(RuntimeError), quota.groups(2, 0.25) as groups:
        paths = [group.path for group in groups]
        assert all(path.exists() for path in paths)
        raise RuntimeError("a drain failed")
    assert not any(path.exists() for path in paths)


def test_held_processes_go_back_to_the_root_cgroup() -> None:
    process = subprocess.Popen(["sleep", "30"])
    try:
        with quota.hold([process.pid], "held") as group:
            assert group.pids() == {process.pid}
            assert (group.path / "cpu.shares").read_text().strip() == str(quota.SHARES)
        assert not group.path.exists()
        assert str(process.pid) in (quota.CPU_ROOT / "cgroup.procs").read_text().split()
    finally:
        process.kill()
        process.wait()
