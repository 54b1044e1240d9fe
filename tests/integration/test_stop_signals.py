"""Every Procfile process exits 0 on SIGTERM at any moment of its life: as a process of its
own (a platform with an init, tini, or Heroku's), and as PID 1 of a PID namespace, as in a
container without an init, where a signal the process has no handler for is dropped.

The moments are counted from the instant the process has taken charge of SIGTERM
(/proc/<pid>/status shows it caught or blocked), which the `webhooks` command does before
it loads anything heavy (webhooks/starting.py); before that only the interpreter starts,
and the test records how long that takes. Two bugs were found this way: the clock had no
handler (as PID 1 it ignored SIGTERM until killed), and the worker started its metrics
server's thread before Dramatiq blocked the stop signals, so a stop in its first second
went to that thread: the main process died (status 143) and left its worker processes
running, or, as PID 1, the signal was dropped and the worker ran until killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import processes
from tests.conftest import ROOT, STRIPE_SECRET, broker_url

MOMENTS = (0.0, 0.05, 0.2, 0.5, 1.0, 2.0)  # seconds after the process took charge
# The longest each may take to stop (docs/processes.md), plus a margin for a busy machine.
BOUNDS = {"clock": 15.0, "worker": 40.0, "web": 15.0, "console": 15.0}
SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def env_for(database_url: str) -> dict[str, str]:
    broker = broker_url().rsplit("/", 1)[0] + "/13" if broker_url().startswith(
        "redis://") else broker_url()
    return {"DATABASE_URL": database_url, "BROKER_URL": broker,
            "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "WEBHOOK_HANDLERS": "webhooks.ledger",
            "CONSOLE_PASSWORD": "stop-signals-console-password",
            "PORT": str(processes.free_port()), "CONSOLE_PORT": str(processes.free_port()),
            # the worker's metrics server: the thread that took the stop before the fix
            "WORKER_METRICS_PORT": str(processes.free_port())}


def in_charge(pid: int) -> bool:
    """SIGTERM is caught or blocked by the process's main thread."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text()
                  .splitlines() if ":" in line)
    return bool((int(fields["SigCgt"], 16) | int(fields["SigBlk"], 16)) & SIGTERM_BIT)


def namespace_init(launcher: subprocess.Popen[bytes]) -> int:
    """The pid (here) of `unshare --fork`'s child, PID 1 of its namespace, once it runs
    Python rather than unshare."""
    own = os.readlink(f"/proc/{launcher.pid}/exe")

    def child() -> int | None:
        try:
            found = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
            return int(found[0]) if found and os.readlink(f"/proc/{found[0]}/exe") != own else None
        except (OSError, IndexError):
            return None

    pid: int = processes.wait_until(child, timeout=30, interval=0.001)
    return pid


def start(process: str, env: dict[str, str], log: Path,
          pid1: bool) -> tuple[subprocess.Popen[bytes], int]:
    command = [sys.executable, "-m", "webhooks", process]
    if pid1:
        command = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *command]
    launched = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env},
                                stdout=log.open("ab"), stderr=subprocess.STDOUT,
                                start_new_session=True)
    return launched, namespace_init(launched) if pid1 else launched.pid


def stop_at(process: str, moment: float, env: dict[str, str], log: Path,
            pid1: bool) -> tuple[int | None, float, float]:
    """Start `process`, SIGTERM it `moment` seconds after it took charge of the signal;
    its exit status (None: still running at its bound, then killed), the seconds it took
    to stop, and the seconds from its start to taking charge."""
    launched, pid = start(process, env, log, pid1)
    started = time.monotonic()
    try:
        processes.wait_until(lambda: in_charge(pid), timeout=30, interval=0.001)
        charge = time.monotonic() - started
        time.sleep(moment)
        os.kill(pid, signal.SIGTERM)
        sent = time.monotonic()
        try:
            code: int | None = launched.wait(BOUNDS[process])
        except subprocess.TimeoutExpired:
            code = None
        return code, time.monotonic() - sent, charge
    finally:
        if launched.poll() is None:
            os.killpg(launched.pid, signal.SIGKILL)
            launched.wait(10)
        leftover = group_members(launched.pid)
        if leftover:
            for member in leftover:
                os.kill(member, signal.SIGKILL)
            pytest.fail(f"{process}: processes left running after its stop: {leftover}")


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[2]) == pgid and stat[0] != "Z":
                members.append(int(entry))
    return members


def can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.parametrize("pid1", [False, True], ids=["own-process", "pid-1"])
@pytest.mark.parametrize("process", ["clock", "worker", "web", "console"])
def test_sigterm_at_any_moment_of_the_start_exits_0(
        process: str, pid1: bool, database_url: str, tmp_path: Path) -> None:
    if pid1 and not can_unshare():
        pytest.skip("a PID namespace needs root and unshare(1)")
    env = env_for(database_url)
    log = tmp_path / f"{process}.log"
    results = {moment: stop_at(process, moment, env, log, pid1) for moment in MOMENTS}
    report = {moment: (code, round(seconds, 2)) for moment, (code, seconds, _) in results.items()}
    print(f"{process} {'pid 1' if pid1 else 'own'}: moment -> (exit, seconds to stop) {report}; "
          f"start to SIGTERM handled {max(charge for *_, charge in results.values()):.3f}s")
    assert all(code == 0 for code, _, _ in results.values()), (
        f"{report}\n{processes_log(log)}")


def processes_log(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-40:])


def test_no_thread_of_the_worker_but_its_main_takes_a_stop(database_url: str,
                                                          tmp_path: Path) -> None:
    """A process-directed SIGTERM goes to a thread that does not block it; only the main
    thread runs handlers, and as PID 1 one that reaches a thread while the handler is
    still the default is dropped. Every thread the worker's main process starts (the
    metrics server's, Dramatiq's log watcher) blocks the stop signals: the metrics
    server used to be started before Dramatiq blocked them."""
    launched, pid = start("worker", env_for(database_url), tmp_path / "worker.log", pid1=False)
    try:
        processes.wait_until(lambda: len(threads_of(pid)) >= 3, timeout=60)
        processes.wait_until(lambda: unblocked(pid) == [], timeout=10)  # main unblocks last
        time.sleep(0.5)
        assert unblocked(pid) == []
        assert not blocks_sigterm(pid, pid), "the main thread must take the stop"
    finally:
        os.killpg(launched.pid, signal.SIGTERM)
        assert launched.wait(BOUNDS["worker"]) == 0


def threads_of(pid: int) -> list[int]:
    return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]


def blocks_sigterm(pid: int, tid: int) -> bool:
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return bool(int(line.split()[1], 16) & SIGTERM_BIT)
    return False


def unblocked(pid: int) -> list[str]:
    """The threads but the main one that do not block SIGTERM, by name."""
    return [Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            for tid in threads_of(pid) if tid != pid and not blocks_sigterm(pid, tid)]


# SIGTERM's handler running inside a weakref callback, as it did inside importlib's module
# lock callback in a container's clock: an exception raised there is printed and dropped.
INSIDE_A_CALLBACK = """
import os, signal, sys, time, weakref
from webhooks import starting
starting.take_charge()

class Thing:
    pass

def callback(_):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.5)  # the handler runs here, inside the callback

thing = Thing()
ref = weakref.ref(thing, callback)
del thing
time.sleep(1)
sys.exit(3)  # the process carried on after the stop
"""


def test_a_stop_whose_handler_runs_inside_a_callback_still_exits_0() -> None:
    """starting.leave ends the process itself: a SystemExit raised from a handler that
    runs inside a weakref callback or a __del__ is printed and dropped by Python, and the
    process goes on starting (in a container, until it is killed: status 137)."""
    done = subprocess.run([sys.executable, "-c", INSIDE_A_CALLBACK], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr
