"""`webhooks dev`: the whole system in one command, on a machine with no servers.

Starts the embedded Postgres and broker unless DATABASE_URL / BROKER_URL are set, applies
migrations, then runs web, worker, clock and console as child processes exactly as the
Procfile would, with the URLs in their environment, listening on 127.0.0.1 only. The
console's password is generated once and kept in the data folder, like the dev secrets.
Ctrl-C (or SIGTERM, SIGHUP) stops everything, the embedded servers it started included.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import click

from webhooks import embedded
from webhooks.console.settings import ConsoleSettings
from webhooks.shared.hooks import REFERENCE_APP
from webhooks.shared.providers import PROVIDERS
from webhooks.shared.settings import Settings

LOOPBACK = "127.0.0.1"
CONSOLE_PORT = ConsoleSettings.port


def dev_secrets(data_dir: Path) -> dict[str, str]:
    """Per-provider secrets for local use, generated once and kept in the data folder."""
    path = data_dir / "dev-secrets.json"
    if path.exists():
        stored: dict[str, str] = json.loads(path.read_text())
        return stored
    embedded.private_folder(data_dir)
    made = {record.SECRET_VARIABLE: record.SECRET_FORMAT.generate()
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
    if env.get("CONSOLE_PORT", "").strip():
        return env["CONSOLE_PORT"].strip()
    with socket.socket() as sock:
        try:
            if web_port == CONSOLE_PORT:
                raise OSError("the web's port")
            sock.bind((LOOPBACK, CONSOLE_PORT))
            return str(CONSOLE_PORT)
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
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("WORKER_METRICS_HOST", LOOPBACK)
    # The reference app runs unless the variable says which apps do (set, even empty).
    env.setdefault("WEBHOOK_HANDLERS", REFERENCE_APP)
    return env


def run(settings: Settings) -> int:
    click.echo("starting embedded services..." if not settings.database_url else "starting...")
    try:
        env = environment(settings)
        command = [sys.executable, "-m", "webhooks"]
        subprocess.run([*command, "migrate"], env=env, check=True)
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
        _banner(settings, env)
        return _supervise(children)
    finally:
        _stop_embedded(settings)


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


def _supervise(children: dict[str, subprocess.Popen[bytes]]) -> int:
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    status = 0
    while not stopping:
        for name, child in children.items():
            if child.poll() is not None:
                click.echo(f"{name} exited with {child.returncode}; stopping", err=True)
                status, stopping = 1, True
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
