"""CPU quotas for the scale-out benchmark: each `webhooks worker` group in a cgroup of its own
(cgroup v1's cpu controller), limited to a fraction of a core, as a small host would limit it.

On a machine with few cores, one worker group and Postgres keep every core busy, so a second
group finds nothing to run on and the ratio two / one measures the machine. With each group
held to `cpu.cfs_quota_us` / `cpu.cfs_period_us` of a core, the groups are the bound, not the
machine, and a second group adds what a second host would, until Postgres (left unlimited:
it is the shared server the others connect to) runs out of cores.

A cgroup's membership is inherited by the processes forked after a process joins it, so a
group's leader joins before it forks: Group.command() wraps the command in a shell that
writes its own pid to `cgroup.procs` and then execs it. `cpu.stat` (nr_periods, nr_throttled,
throttled_time) says whether the quota was what held the group back. The cgroups are removed
on the way out, errors included, once their processes have exited.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000  # the kernel's default period: the quota is spent in 100 ms slices
# The cgroups' weight against the machine's other processes (each weighs 1024): four
# processes' worth, so that on a busy machine each group still gets its quota (which caps
# it), as a host of its own would, and the benchmark's own Postgres (hold()) the cores it
# asks for; not so high that the benchmark's own process (the clock's sweep, the polling)
# and the broker, left in the root cgroup, wait behind them.
SHARES = 4096
# The shell that moves itself into the cgroup (its path is $0) and becomes the command.
JOIN_AND_EXEC = 'echo $$ > "$0" && exec "$@"'


def unavailable(root: Path = CPU_ROOT) -> str | None:
    """Why quotas cannot be set on this machine, or None when they can."""
    if not (root / "cpu.cfs_quota_us").exists():
        return f"{root} is not cgroup v1's cpu controller (no cpu.cfs_quota_us)"
    if not os.access(root, os.W_OK):
        return f"{root} is not writable (cgroups need root)"
    return None


@dataclass(frozen=True)
class Group:
    """One cgroup of the cpu controller, holding one worker group."""

    path: Path

    def command(self, command: list[str]) -> list[str]:
        """`command`, started inside this cgroup, it and every process it forks."""
        return ["sh", "-c", JOIN_AND_EXEC, str(self.path / "cgroup.procs"), *command]

    def pids(self) -> set[int]:
        return {int(line) for line in (self.path / "cgroup.procs").read_text().split()}

    def stat(self) -> dict[str, int]:
        """cpu.stat: nr_periods, nr_throttled, throttled_time (ns), as the kernel counts
        them since the cgroup was made."""
        fields = (line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        return {name: int(value) for name, value in fields}


@contextmanager
def groups(count: int, cores: float, root: Path = CPU_ROOT) -> Iterator[list[Group]]:
    """`count` new cgroups under `root`, each allowed `cores` of a core, named after this
    process; removed when the block ends, once the processes in them have exited."""
    quota = round(cores * PERIOD_US)
    if quota < 1000:
        raise ValueError(f"a quota of {cores} cores is under the kernel's 1 ms minimum")
    made: list[Path] = []
    try:
        for n in range(1, count + 1):
            path = root / f"webhooks-bench-{os.getpid()}-g{n}"
            path.mkdir()
            made.append(path)
            (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (path / "cpu.cfs_quota_us").write_text(str(quota))
            (path / "cpu.shares").write_text(str(SHARES))
        yield [Group(path) for path in made]
    finally:
        for path in made:
            remove(path, root)


@contextmanager
def hold(pids: Iterable[int], name: str, root: Path = CPU_ROOT) -> Iterator[Group]:
    """Running processes (a server's, its first process before the others: those it forks
    later are born inside) moved into a new cgroup of weight SHARES and no quota, for
    the block; moved back to the root cgroup at its end, and the cgroup removed."""
    path = root / f"webhooks-bench-{os.getpid()}-{name}"
    path.mkdir()
    try:
        (path / "cpu.shares").write_text(str(SHARES))
        for pid in pids:
            _move(pid, path)
        yield Group(path)
    finally:
        for pid in Group(path).pids():
            _move(pid, root)
        remove(path, root)


def _move(pid: int, cgroup: Path) -> None:
    try:
        (cgroup / "cgroup.procs").write_text(str(pid))
    except ProcessLookupError:  # it exited meanwhile
        pass


def remove(path: Path, root: Path = CPU_ROOT, timeout: float = 10) -> None:
    """rmdir the cgroup, which the kernel refuses while a process is in it: wait for the
    exiting ones, then move any left (a straggler of ours) back to the root cgroup."""
    deadline, moved = time.monotonic() + timeout, False
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY or (moved and time.monotonic() > deadline):
                raise
            if time.monotonic() > deadline:
                for pid in Group(path).pids():
                    _move(pid, root)
                deadline, moved = time.monotonic() + 2, True
            time.sleep(0.1)
