"""`webhooks dev`: the whole system in one command, on a machine with no servers.

Starts the embedded Postgres and broker unless DATABASE_URL / BROKER_URL are set, applies
migrations, then runs web, worker, clock and console as child processes exactly as the
Procfile would, with the URLs in their environment, listening on 127.0.0.1 only. The
console's password is generated once and kept in the data folder, like the dev secrets.
Ctrl-C (or SIGTERM, SIGHUP) stops everything, the embedded servers it started included.

"webhooks is running" is printed once every process is up (`wait_until_up`): web's
/healthz answers 200, the console answers, the worker's metrics port answers (its
WORKER_METRICS_PORT, free when dev chose it, so the answer is this worker's), and the clock
has swept (a clock_heartbeats stamp newer than the children's start). A child that exits
before, or a process not up within UP_SECONDS, is one line naming it (and its exit code);
everything stops, exit 1, no banner. The apps WEBHOOK_HANDLERS names were imported before
anything started (webhooks/cli.py `dev`): a module that fails to import is one line, as
for every process.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import click
import requests
import sqlalchemy as sa

from webhooks import embedded
from webhooks.console.settings import ConsoleSettings
from webhooks.shared import db
from webhooks.shared.hooks import REFERENCE_APP
from webhooks.shared.providers import PROVIDERS
from webhooks.shared.settings import Settings

LOOPBACK = "127.0.0.1"
CONSOLE_PORT = ConsoleSettings.port
WORKER_METRICS_PORT = 9191  # Settings' default
UP_SECONDS = 120.0  # the longest `dev` waits for its processes to be up


def dev_secrets(data_dir: Path) -> dict[str, str]:
    """Per-provider secrets for local use, generated once and kept in the data folder."""
    path = data_dir / "dev-secrets.json"
    if path.exists():
        stored: dict[str, str] = json.loads(path.read_text())
        return stored
    embedded.private_folder(data_dir)
    made = {record.secret_variable: record.secret_format.generate()
            for record in PROVIDERS.values()}
    embedded.write_private(path, json.dumps(made, indent=2))
    return made


def dev_console_password(data_dir: Path) -> str:
    """The console's password for local use, generated once and kept in the data folder."""
    path = data_dir / "console-password"
    if path.exists():
        return path.read_text().strip()
    embedded.private_folder(data_dir)
    password = secrets.token_urlsafe(18)
    embedded.write_private(path, password + "\n")
    return password


def _console_port(env: dict[str, str], web_port: int) -> str:
    """CONSOLE_PORT if set; else 8001, or any free port when 8001 is taken (another
    `webhooks dev`) or is the web's."""
    return _port(env, "CONSOLE_PORT", CONSOLE_PORT, {web_port})


def _port(env: dict[str, str], variable: str, preferred: int, taken: set[int]) -> str:
    """`variable` if set; else `preferred`, or any free port when it is taken or in
    `taken` (the other processes')."""
    if env.get(variable, "").strip():
        return env[variable].strip()
    with socket.socket() as sock:
        try:
            if preferred in taken:
                raise OSError("another process's port")
            sock.bind((LOOPBACK, preferred))
            return str(preferred)
        except OSError:
            sock.bind((LOOPBACK, 0))
            return str(sock.getsockname()[1])


def environment(settings: Settings) -> dict[str, str]:
    """The environment for the child processes: the URLs (of the embedded servers, started
    here, where DATABASE_URL or BROKER_URL is unset) and the dev secrets."""
    env = dict(os.environ)
    embedded.private_folder(settings.data_dir)  # before any server writes its files into it
    env["DATABASE_URL"] = settings.database_url or embedded.start_postgres(settings.data_dir)
    env["BROKER_URL"] = settings.broker_url or embedded.start_broker(settings.data_dir)
    env["WEBHOOKS_DATA_DIR"] = str(settings.data_dir)
    for variable, value in dev_secrets(settings.data_dir).items():
        env.setdefault(variable, value)
    env.setdefault("CONSOLE_PASSWORD", dev_console_password(settings.data_dir))
    env["CONSOLE_PORT"] = _console_port(env, settings.port)
    env["WORKER_METRICS_PORT"] = _port(env, "WORKER_METRICS_PORT", WORKER_METRICS_PORT,
                                       {settings.port, int(env["CONSOLE_PORT"])})
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("WORKER_METRICS_HOST", LOOPBACK)
    # The reference app runs unless the variable says which apps do (set, even empty).
    env.setdefault("WEBHOOK_HANDLERS", REFERENCE_APP)
    return env


def run(settings: Settings) -> int:
    click.echo("starting embedded services..." if not settings.database_url else "starting...")
    with contextlib.ExitStack() as stack:
        stack.callback(_stop_embedded, settings)
        return _run(settings, stack)


def _run(settings: Settings, stack: contextlib.ExitStack) -> int:
    env = environment(settings)
    command = [sys.executable, "-m", "webhooks"]
    migrated = subprocess.run([*command, "migrate"], env=env, check=False)
    if migrated.returncode != 0:
        click.echo(f"webhooks: migrate exited with {migrated.returncode}; stopping", err=True)
        return 1
    engine = db.create_engine(Settings.from_env(env), pool_size=1)
    stack.callback(engine.dispose)
    started = _database_now(engine)
    stop = _Stop()
    children = {
        # The granian servers (web, console) in process groups of their own: Ctrl-C
        # reaches only `dev`, which stops each with one SIGTERM. A SIGINT from the
        # terminal to granian's parent and its server processes at once sometimes left
        # one of them to be killed after 10 s.
        "web": subprocess.Popen([*command, "web", "--workers", "2", "--host", LOOPBACK],
                                env=env, process_group=0),
        "worker": subprocess.Popen([*command, "worker", "--processes", "1"], env=env),
        "clock": subprocess.Popen([*command, "clock"], env=env),
        "console": subprocess.Popen([*command, "console", "--host", LOOPBACK], env=env,
                                    process_group=0),
    }
    up: bool | None = False
    try:
        up = wait_until_up(children, _readiness(settings, env, engine, started), stop)
        if up:
            _banner(settings, env)
    finally:  # whatever happened, the children are stopped before `dev` returns
        status = _supervise(children, stop, failed=up is False)
    return status


class _Stop:
    """Ctrl-C, SIGTERM or SIGHUP asked `dev` to stop everything (handled from the start:
    a signal while the processes come up stops them too)."""

    def __init__(self) -> None:
        self.requested = False
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self.request)

    def request(self, *_: object) -> None:
        self.requested = True


def _database_now(engine: sa.Engine) -> object:
    """The database server's clock, before the children start: a clock's sweep stamps
    clock_heartbeats later than this."""
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT now()")).scalar_one()


def _readiness(settings: Settings, env: dict[str, str], engine: sa.Engine,
               started: object) -> dict[str, Callable[[], bool]]:
    """What shows each process up, by name (module docstring)."""
    web = f"http://{LOOPBACK}:{settings.port}/healthz"
    console = f"http://{LOOPBACK}:{env['CONSOLE_PORT']}/"
    checks = {
        "web": lambda: _answers(web, ok_only=True),
        "console": lambda: _answers(console),
        "clock": lambda: _swept(engine, started),
    }
    if env["WORKER_METRICS_PORT"] not in ("", "0"):  # 0: no metrics; its exit still shows
        metrics = f"http://{env.get('WORKER_METRICS_HOST', LOOPBACK)}:{env['WORKER_METRICS_PORT']}/"
        checks["worker"] = lambda: _answers(metrics)
    return checks


def _answers(url: str, *, ok_only: bool = False) -> bool:
    try:
        answer = requests.get(url, timeout=1)
    except requests.RequestException:
        return False
    return answer.status_code == 200 if ok_only else answer.status_code < 500


def _swept(engine: sa.Engine, started: object) -> bool:
    try:
        with engine.connect() as conn:
            return bool(conn.execute(sa.text(
                "SELECT EXISTS (SELECT FROM clock_heartbeats WHERE beat_at >= :started)"),
                {"started": started}).scalar_one())
    except sa.exc.SQLAlchemyError:
        return False


def wait_until_up(children: dict[str, subprocess.Popen[bytes]],
                  checks: dict[str, Callable[[], bool]], stop: _Stop,
                  seconds: float = UP_SECONDS) -> bool | None:
    """True once every check holds (each looked at until it does); False, after one line,
    when a child exits first (naming it and its exit code) or a check does not hold
    within `seconds`; None when asked to stop meanwhile."""
    waiting = dict(checks)
    deadline = time.monotonic() + seconds
    while waiting:
        if stop.requested:
            return None
        for name, child in children.items():
            if child.poll() is not None:
                click.echo(f"webhooks: {name} exited with {child.returncode} before it was up; "
                           f"stopping", err=True)
                return False
        waiting = {name: check for name, check in waiting.items() if not check()}
        if not waiting:
            break
        if time.monotonic() > deadline:
            click.echo(f"webhooks: not up within {seconds:g} s: {', '.join(waiting)}; stopping",
                       err=True)
            return False
        time.sleep(0.2)
    return True


def _stop_embedded(settings: Settings) -> None:
    """Stop the embedded servers `dev` started; the data stays for the next run."""
    if settings.broker_url is None:
        embedded.stop_broker(settings.data_dir)
    if settings.database_url is None:
        embedded.stop_postgres(settings.data_dir)
    click.echo("stopped")


def without_password(url: str) -> str:
    """A server URL to print: its password, if any, shown as ***."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _banner(settings: Settings, env: dict[str, str]) -> None:
    url = f"http://{LOOPBACK}:{settings.port}"
    password = (f"{env['CONSOLE_PASSWORD']}   (kept in {settings.data_dir / 'console-password'})"
                if os.environ.get("CONSOLE_PASSWORD") is None
                else "$CONSOLE_PASSWORD, as set in the environment")
    click.echo(f"""
webhooks is running
  ingest:   {url}/webhooks/<provider>   ({', '.join(PROVIDERS)})
  health:   {url}/healthz  {url}/readyz  {url}/metrics
  console:  http://{LOOPBACK}:{env['CONSOLE_PORT']}/
            user {ConsoleSettings.from_env(env).user}, password {password}
  database: {without_password(env['DATABASE_URL'])}
  broker:   {without_password(env['BROKER_URL'])}
  secrets:  {settings.data_dir / 'dev-secrets.json'} (unless set in the environment)

send a signed test event (in another terminal, same folder):
  webhooks send stripe examples/stripe/invoice_paid.json --repeat 5 --concurrency 5
  webhooks stats
Ctrl-C stops everything.
""")


def _supervise(children: dict[str, subprocess.Popen[bytes]], stop: _Stop, *,
               failed: bool = False) -> int:
    """Until a signal (exit 0) or a child's exit (exit 1), then stop every child;
    `failed`: they did not come up (wait_until_up said why): stop them now, exit 1."""
    status = 1 if failed else 0
    while not stop.requested and not failed:
        for name, child in children.items():
            if child.poll() is not None:
                click.echo(f"{name} exited with {child.returncode}; stopping", err=True)
                status = 1
                stop.request()
        time.sleep(0.2)
    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for child in children.values():
        try:
            child.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            child.kill()
    return status
