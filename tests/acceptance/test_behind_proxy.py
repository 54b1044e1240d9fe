"""`web` behind a real reverse proxy: Debian's nginx on loopback, appending the client it
sees to X-Forwarded-For (`$proxy_add_x_forwarded_for`), in front of the real `webhooks web`.

Clients connect to nginx from distinct loopback addresses (127.0.0.2, 127.0.0.3, ...), while
nginx itself reaches `web` from 127.0.0.1, so the test tells the client's address from the
proxy's: with TRUSTED_PROXIES=1 the allowlist sees the client nginx saw; a forged
X-Forwarded-For is only ever the left part of the header and is never looked at.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from tests.integration.test_ingest import count
from webhooks.shared.providers import github
from webhooks.shared.settings import Settings


def _nginx() -> str | None:
    return shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
         if os.access(path, os.X_OK)), None)


NGINX = _nginx()
pytestmark = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (Debian: apt-get install nginx; .ci/run does)")

CLIENT = "127.0.0.2"  # the allowed client
STRANGER = "127.0.0.3"  # a client outside every list
GITHUB_SECRET = "github-proxy-test"
CONFIG = """
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://127.0.0.1:{upstream};
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
    }}
}}
"""


@contextmanager
def nginx(upstream: int, folder: Path) -> Iterator[int]:
    """nginx in the foreground, with its own config, logs and temp folders in folder."""
    folder.mkdir()
    port = processes.free_port()
    config = folder / "nginx.conf"
    config.write_text(CONFIG.format(dir=folder, port=port, upstream=upstream))
    assert NGINX is not None
    process = subprocess.Popen(
        [NGINX, "-p", str(folder), "-e", str(folder / "error.log"), "-c", str(config),
         "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        processes.wait_until(lambda: _listening(port) or process.poll() is not None, 10)
        assert process.poll() is None, (folder / "error.log").read_text()
        yield port
    finally:
        processes.stop(process)


def _listening(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        connection.request("GET", "/healthz")
        connection.getresponse().read()
    except OSError:
        return False
    return True


@contextmanager
def web(settings: Settings, log: Path, **env: str) -> Iterator[int]:
    port = processes.free_port()
    full = {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
            "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "GITHUB_WEBHOOK_SECRET": GITHUB_SECRET,
            "PORT": str(port), **env}
    process = processes.start(["web", "--workers", "1", "--host", "127.0.0.1"], full, log)
    try:
        processes.wait_http(f"http://127.0.0.1:{port}/healthz")
        yield port
    finally:
        processes.stop(process)


def deliver(port: int, source: str, event_id: str, provider: str = "stripe",
            **headers: str) -> int:
    """POST a signed delivery to nginx from the loopback address source; the status."""
    body = json.dumps(factories.stripe_event("invoice.paid", factories.invoice(),
                                             event_id=event_id)).encode()
    if provider == "stripe":
        signed = {"Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)}
    else:
        signed = {**github.sign(body, GITHUB_SECRET, time.time()), "X-GitHub-Event": "push"}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                            source_address=(source, 0))
    try:
        connection.request("POST", f"/webhooks/{provider}", body=body,
                           headers={**signed, **headers, "Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _posts(access_log: Path, expected: int) -> list[str] | None:
    """The client address of each POST nginx logged, once there are `expected` of them."""
    lines = access_log.read_text().splitlines() if access_log.exists() else []
    posts = [line.split()[0] for line in lines if "POST /webhooks/" in line]
    return posts if len(posts) >= expected else None


def test_one_trusted_proxy_the_client_nginx_saw_decides(
        settings: Settings, clean_db: Engine, tmp_path: Path) -> None:
    env = {"TRUSTED_PROXIES": "1", "STRIPE_ALLOWED_IPS": CLIENT,
           "GITHUB_ALLOWED_IPS": "10.9.9.9"}
    with web(settings, tmp_path / "web.log", **env) as upstream, \
            nginx(upstream, tmp_path / "nginx") as port:
        assert deliver(port, CLIENT, "evt_through_proxy") == 200
        assert deliver(port, STRANGER, "evt_stranger") == 403
        # nginx's own address (the socket's peer at web) is not what decides.
        assert deliver(port, "127.0.0.1", "evt_proxy_itself") == 403
        # A forged header: nginx appends the real peer, and only that entry is read.
        forged = {"X-Forwarded-For": CLIENT}
        assert deliver(port, STRANGER, "evt_forged", **forged) == 403
        # A list without any loopback address refuses every client here, forged or not.
        for source in (CLIENT, STRANGER, "127.0.0.1"):
            assert deliver(port, source, f"gh_{source}", "github") == 403
            assert deliver(port, source, f"gh_forged_{source}", "github",
                           **{"X-Forwarded-For": "10.9.9.9"}) == 403
        # Every delivery went through nginx, which saw each client's own address. nginx
        # logs a request once it has finished it, a moment after the client has its answer.
        posts = processes.wait_until(lambda: _posts(tmp_path / "nginx" / "access.log", 10),
                                     timeout=10)
    assert sorted(set(posts)) == ["127.0.0.1", CLIENT, STRANGER] and len(posts) == 10
    assert count(clean_db, "webhook_events") == 1
    assert count(clean_db, "jobs") == 1
    log = (tmp_path / "web.log").read_text()
    assert f"source address {STRANGER} is not allowed for stripe" in log
    assert "source address 127.0.0.1 is not allowed for stripe" in log


def test_without_trusted_proxies_every_client_looks_like_the_proxy(
        settings: Settings, clean_db: Engine, tmp_path: Path) -> None:
    """TRUSTED_PROXIES=0 behind a proxy: the client is nginx's own 127.0.0.1, whatever
    X-Forwarded-For says; so an allowlist then needs the proxy's address (and the proxy
    then is the only control: set TRUSTED_PROXIES)."""
    with web(settings, tmp_path / "web.log", STRIPE_ALLOWED_IPS=CLIENT) as upstream, \
            nginx(upstream, tmp_path / "nginx") as port:
        assert deliver(port, CLIENT, "evt_untrusted") == 403
    with web(settings, tmp_path / "web2.log", STRIPE_ALLOWED_IPS="127.0.0.1") as upstream, \
            nginx(upstream, tmp_path / "nginx2") as port:
        assert deliver(port, STRANGER, "evt_any_client", **{"X-Forwarded-For": "10.1.1.1"}) \
            == 200
    assert count(clean_db, "webhook_events") == 1
