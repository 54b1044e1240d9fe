"""Guarantee 9 (docs/guarantees.md): a host partitioned from the database delays others'
work by at most 30 s and applies nothing twice when it comes back.

The cut-off host is a Linux network namespace joined to this one by a veth pair with
private addresses; a private Postgres and Redis listen on this end's address. Setting the
namespace's end of the link down drops every packet, with no reset: the server learns
nothing from TCP itself. Needs root and `ip netns`; everything it creates (namespace,
link, servers, processes, folders) goes at its end, pass or fail.

WEBHOOKS_PARTITION_WAIT (seconds, default 60) is how long the test waits for a takeover
before it fails: raise it to measure how long one takes without the fix.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.acceptance.harness import (
    PrivatePostgres,
    PrivateRedis,
    Service,
    procfile,
    tail,
    wait_for,
)
from tests.acceptance.signing import SECRET_VARIABLES, SECRETS

pytestmark = pytest.mark.slow

BOUND = 30.0  # SPEC.md "Partitions": seconds a cut-off host may hold others' work
HEAL_BOUND = 60.0  # and new jobs done within this long of the heal
WAIT = float(os.environ.get("WEBHOOKS_PARTITION_WAIT", "60"))
CUT_OFF_SLEEP = "20"  # the cut-off worker's handler: pg_sleep inside its transaction
SLOW_JOBS = 30


def _netns_available() -> str | None:
    """Why the test cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip`"
    probe = f"whprobe{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None if made.returncode == 0 else "`ip netns add` is refused here"


def _free_network() -> ipaddress.IPv4Network:
    """A /30 in 10.213.0.0/16 that no interface of this machine uses."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True,
                          check=True).stdout
    taken = [ipaddress.ip_interface(word).network for line in used.splitlines()
             for word in line.split() if "/" in word and word[0].isdigit()]
    for _ in range(100):
        network = ipaddress.ip_network(
            f"10.213.{secrets.randbelow(256)}.{4 * secrets.randbelow(64)}/30")
        if not any(network.overlaps(other) for other in taken):
            return network
    raise RuntimeError("no free 10.213.x.y/30")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@dataclass
class Link:
    """A namespace `namespace` joined to this one: `host` here, `remote` inside."""

    namespace: str
    outer: str
    inner: str
    host: str
    remote: str
    network: str

    def cut(self) -> None:
        """Packets dropped both ways, no reset sent to anyone."""
        ip("netns", "exec", self.namespace, "ip", "link", "set", self.inner, "down")

    def heal(self) -> None:
        ip("netns", "exec", self.namespace, "ip", "link", "set", self.inner, "up")


@contextlib.contextmanager
def namespace_link() -> Iterator[Link]:
    network = _free_network()
    host, remote = (str(address) for address in network.hosts())
    tag = secrets.token_hex(3)
    link = Link(f"whpart{tag}", f"whh{tag}", f"whn{tag}", host, remote, str(network))
    try:
        ip("netns", "add", link.namespace)
        ip("link", "add", link.outer, "type", "veth", "peer", "name", link.inner)
        ip("link", "set", link.inner, "netns", link.namespace)
        ip("addr", "add", f"{host}/30", "dev", link.outer)
        ip("link", "set", link.outer, "up")
        inside = ("netns", "exec", link.namespace, "ip")
        ip(*inside, "addr", "add", f"{remote}/30", "dev", link.inner)
        ip(*inside, "link", "set", link.inner, "up")
        ip(*inside, "link", "set", "lo", "up")
        yield link
    finally:
        subprocess.run(["ip", "link", "delete", link.outer], capture_output=True)
        subprocess.run(["ip", "netns", "delete", link.namespace], capture_output=True)


class Hosts:
    """Private Postgres and Redis on this end of the link; processes on either end."""

    def __init__(self, link: Link, workdir: Path) -> None:
        self.link = link
        self.dir = workdir
        self.postgres = PrivatePostgres(listen=("127.0.0.1", link.host),
                                        clients=(link.network,))
        self.redis = PrivateRedis(workdir, listen=("127.0.0.1", link.host))
        self.services: list[Service] = []
        self.engine: sa.Engine | None = None

    def start(self) -> None:
        self.postgres.create()
        self.redis.start()
        self.engine = sa.create_engine(
            self.postgres.url.replace("postgresql://", "postgresql+psycopg://"),
            poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 3})
        result = subprocess.run(procfile()["release"], shell=True, env=self.env(),  # noqa: S602
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]

    def env(self, **extra: str) -> dict[str, str]:
        inherited = {k: v for k, v in os.environ.items()
                     if k not in ("DATABASE_URL", "BROKER_URL", "PROMETHEUS_MULTIPROC_DIR",
                                  "WEBHOOK_HANDLERS", "POSTMARK_SERVER_TOKEN")}
        venv_bin = str(Path(sys.executable).parent)
        return {
            **inherited,
            "PATH": venv_bin + os.pathsep + inherited.get("PATH", ""),
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            # Both ends reach the servers at this end's address of the link.
            "DATABASE_URL": f"postgresql://postgres@{self.link.host}:{self.postgres.port}"
                            "/webhooks",
            "BROKER_URL": f"redis://{self.link.host}:{self.redis.port}/0",
            **{SECRET_VARIABLES[p]: SECRETS[p] for p in SECRETS},
            "SWEEP_INTERVAL_SECONDS": "1",
            "JOB_RETRY_BASE_SECONDS": "0.2",
            "WEBHOOKS_DATA_DIR": str(self.dir / "data"),
            "WEBHOOK_HANDLERS": "webhooks.ledger,tests.handlers_for_tests",
            "TEST_HANDLER_SLEEP": "0.2",
            "WORKER_METRICS_PORT": "0",
            **extra,
        }

    def run(self, name: str, *, cut_off: bool, **env: str) -> Service:
        """A Procfile entry, inside the namespace (cut_off) or here."""
        command = procfile()[name.split(".")[0]]
        if cut_off:
            command = f"ip netns exec {self.link.namespace} {command}"
        service = Service(name, command, self.env(**env), self.dir / f"{name}.log")
        service.start()
        self.services.append(service)
        return service

    def stop(self) -> None:
        for service in self.services:
            service.signal_group(15)
        for service in self.services:
            service.stop(timeout=20)
        self.redis.stop()
        if self.engine is not None:
            self.engine.dispose()
        self.postgres.destroy()

    def logs(self) -> str:
        return "\n".join(f"--- {s.name} ---\n{tail(s.log, 40)}" for s in self.services) + (
            f"\n--- postgres ---\n{tail(self.postgres.log, 20)}")

    def rows(self, sql: str, **params: object) -> list[sa.Row[tuple[object, ...]]]:
        assert self.engine is not None
        with self.engine.begin() as conn:
            return list(conn.execute(sa.text(sql), params).all())

    def scalar(self, sql: str, **params: object) -> object:
        return self.rows(sql, **params)[0][0]

    def cut_off_locks(self) -> int:
        """Locks held by sessions of the namespace's address (row locks show as the
        transaction's own; advisory locks as themselves)."""
        return int(self.scalar(  # type: ignore[call-overload]
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE a.client_addr = CAST(:remote AS inet) AND l.granted",
            remote=self.link.remote))

    def locked_pending_jobs(self) -> int:
        """Pending jobs some open transaction holds: those a claim skips."""
        assert self.engine is not None
        with self.engine.connect() as conn, conn.begin():
            pending = conn.execute(sa.text(
                "SELECT count(*) FROM jobs WHERE status = 'pending'")).scalar_one()
            free = len(conn.execute(sa.text(
                "SELECT id FROM jobs WHERE status = 'pending' FOR UPDATE SKIP LOCKED")).all())
            conn.rollback()
        return int(pending) - free

    def insert(self, event_type: str, customer: str, extra: dict[str, object]) -> str:
        import json

        event_id = f"evt_{secrets.token_hex(12)}"
        payload = {"id": event_id, "object": "event", "type": event_type,
                   "created": int(time.time()),
                   "data": {"object": {"customer": customer, **extra}}}
        self.rows("WITH e AS (INSERT INTO webhook_events (provider, source, event_id, "
                  "event_type, payload) VALUES ('stripe', 'stripe', :e, :t, "
                  "CAST(:p AS jsonb)) RETURNING 1) "
                  "INSERT INTO jobs (provider, source, event_id, event_type) "
                  "SELECT 'stripe', 'stripe', :e, :t FROM e RETURNING id",
                  e=event_id, t=event_type, p=json.dumps(payload))
        return event_id


@pytest.fixture()
def hosts(request: pytest.FixtureRequest) -> Iterator[Hosts]:
    reason = _netns_available()
    if reason:
        pytest.skip(reason)
    # Its own folder, removed at the end (its logs are printed first if the test failed).
    with tempfile.TemporaryDirectory(prefix="webhooks-partition-") as workdir, \
            namespace_link() as link:
        running = Hosts(link, Path(workdir))
        try:
            running.start()
            yield running
        finally:
            report = getattr(request.node, "rep_call", None)
            if report is not None and report.failed:
                print(running.logs())
            running.stop()


def _timed(predicate: object, what: str, started: float) -> float:
    """Seconds from `started` until predicate() holds (waiting up to WAIT)."""
    wait_for(predicate, WAIT, what, interval=0.2)  # type: ignore[arg-type]
    return time.monotonic() - started


def test_a_cut_off_worker_holds_others_work_briefly_and_applies_nothing_twice(
        hosts: Hosts) -> None:
    cut_off = hosts.run("worker.cut-off", cut_off=True, TEST_HANDLER_SLEEP=CUT_OFF_SLEEP)
    hosts.run("clock", cut_off=False)
    slow = [hosts.insert("test.slow_credit", f"cus_slow_{n}", {}) for n in range(SLOW_JOBS)]
    # Its batches in flight: each claimed up to its first claim's size, sleeping in its
    # first handler, the rest of its claim locked.
    wait_for(lambda: hosts.locked_pending_jobs() >= 10, 60, "the cut-off worker's batches")
    other = hosts.run("worker.other", cut_off=False)
    wait_for(lambda: other.children(), 30, "the other worker's processes")
    time.sleep(2)  # the other worker takes what nobody holds
    held = hosts.locked_pending_jobs()
    assert held > 0 and hosts.cut_off_locks() > 0, hosts.logs()

    hosts.link.cut()
    started = time.monotonic()
    unlocked = _timed(lambda: hosts.cut_off_locks() == 0, "cut-off sessions' locks gone",
                      started)
    done = _timed(lambda: hosts.scalar("SELECT count(*) FROM jobs WHERE status <> 'done'")
                  == 0, "every job done", started)
    print(f"\npartition: {held} jobs held by the cut-off worker; its locks gone after "
          f"{unlocked:.1f}s, every job done after {done:.1f}s")
    assert done <= BOUND, hosts.logs()

    # The heal: only the cut-off worker runs; new jobs are done by it, without a restart.
    other.stop()
    pid = cut_off.process.pid if cut_off.process else None
    hosts.link.heal()
    healed = time.monotonic()
    paid = [hosts.insert("invoice.paid", f"cus_paid_{n}", {
        "id": f"in_{secrets.token_hex(8)}", "object": "invoice", "amount_paid": 700,
        "amount_due": 700, "currency": "usd", "customer_email": None}) for n in range(5)]
    after = _timed(lambda: hosts.scalar("SELECT count(*) FROM jobs WHERE status <> 'done'")
                   == 0, "new jobs done after the heal", healed)
    print(f"partition: new jobs done by the healed worker {after:.1f}s after the heal")
    assert after <= HEAL_BOUND, hosts.logs()
    assert cut_off.alive() and cut_off.process is not None and cut_off.process.pid == pid

    # Applied once: each slow credit adds 100 to its own customer's balance with no key,
    # so a second application would show; each invoice is one ledger entry.
    balances = dict(hosts.rows("SELECT customer_id, balance FROM accounts "
                               "WHERE customer_id LIKE 'cus_slow_%'"))
    assert balances == {f"cus_slow_{n}": 100 for n in range(SLOW_JOBS)}
    assert hosts.scalar("SELECT count(*) FROM jobs WHERE status = 'done' AND event_id = "
                        "ANY(:ids)", ids=slow + paid) == len(slow) + len(paid)
    entries = hosts.rows("SELECT entry_key, count(*) FROM ledger_entries "
                         "WHERE kind = 'invoice' GROUP BY 1")
    assert len(entries) == len(paid) and all(count == 1 for _, count in entries), entries


def test_a_cut_off_clock_gives_up_its_lock_and_another_sweeps(hosts: Hosts) -> None:
    """A clock's lock is transaction-level, one tick at a time: a clock cut off mid-tick
    holds it (and every other clock skips its ticks) until the server ends its session.
    The test catches the cut-off clock mid-tick by holding the jobs table, so that its
    sweep waits with the lock taken, then lets the sweep answer into the cut link."""
    hosts.insert("test.slow_credit", "cus_due", {})  # due work: a sweep logs it
    assert hosts.engine is not None
    with hosts.engine.connect() as blocker:
        # The role's idle_in_transaction_session_timeout would end the blocker too.
        blocker.execute(sa.text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        blocker.execute(sa.text("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE"))
        cut_off = hosts.run("clock.cut-off", cut_off=True)
        sweeping = ("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
                    "WHERE a.client_addr = CAST(:remote AS inet) AND l.locktype = 'advisory' "
                    "AND l.granted AND a.wait_event_type = 'Lock'")
        # Its sweep (and its first audit, which reads jobs too) wait with their locks taken.
        wait_for(lambda: hosts.scalar(sweeping, remote=hosts.link.remote) >= 1, 60,
                 "the cut-off clock mid-sweep")
        other = hosts.run("clock.other", cut_off=False)
        wait_for(lambda: "clock started" in other.log.read_text(), 60, "the other clock")
        time.sleep(2)
        assert "sweep woke workers" not in other.log.read_text()  # it skips: lock taken
        hosts.link.cut()
        started = time.monotonic()
        blocker.rollback()  # the cut-off clock's sweep goes on, answering into the cut
    released = _timed(lambda: hosts.scalar(sweeping.replace(
        " AND a.wait_event_type = 'Lock'", ""), remote=hosts.link.remote) == 0,
        "the cut-off clock's lock gone", started)
    swept = _timed(lambda: "sweep woke workers" in other.log.read_text(),
                   "the other clock sweeping", started)
    print(f"\npartition: cut-off clock's lock gone after {released:.1f}s; the other clock "
          f"swept after {swept:.1f}s")
    assert swept <= BOUND, hosts.logs()
    assert cut_off.alive()
