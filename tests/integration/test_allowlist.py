"""Ingress controls against a real Postgres: `<PROVIDER>_ALLOWED_IPS` (403 before anything
else), TRUSTED_PROXIES (the client taken from X-Forwarded-For, from the right), and the
per-secret verification counter that lets a rotation be finished.

The first tests drive the app through Flask's test client, setting the socket's peer with
REMOTE_ADDR; the last ones run the real `webhooks web` (granian) over real sockets, IPv4
and IPv6."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from tests.integration.test_ingest import count
from webhooks.ingest.app import create_app
from webhooks.shared.settings import Settings

ALLOWED = "3.18.12.63"  # one of Stripe's published webhook addresses
DISALLOWED = "10.9.9.9"
MAX_BODY = 4096


def make_client(settings: Settings, **env: str) -> FlaskClient:
    configured = Settings.from_env({"DATABASE_URL": settings.database_url or "",
                                    "BROKER_URL": settings.broker_url or "",
                                    "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
                                    "MAX_BODY_BYTES": str(MAX_BODY), **env})
    return create_app(configured).test_client()


def delivery(event_id: str, secret: str = STRIPE_SECRET) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(factories.stripe_event("invoice.paid", factories.invoice(),
                                             event_id=event_id)).encode()
    return body, {"Stripe-Signature": factories.stripe_signature(body, secret),
                  "Content-Type": "application/json"}


def post(client: FlaskClient, peer: str, event_id: str, provider: str = "stripe",
         **headers: str) -> Any:
    body, signed = delivery(event_id)
    return client.post(f"/webhooks/{provider}", data=body, headers={**signed, **headers},
                       environ_base={"REMOTE_ADDR": peer})


def rejected(provider: str = "stripe", reason: str = "source_ip",
             source: str | None = None) -> float:
    return REGISTRY.get_sample_value("webhooks_deliveries_rejected_total", {
        "provider": provider, "source": source or provider, "reason": reason}) or 0.0


def verified(secret: str, provider: str = "stripe") -> float:
    return REGISTRY.get_sample_value("webhooks_signature_verified_total", {
        "provider": provider, "source": provider, "secret": secret}) or 0.0


def written(engine: Engine) -> tuple[int, int]:
    return count(engine, "webhook_events"), count(engine, "jobs")


def test_an_allowed_address_is_recorded(settings: Settings, clean_db: Engine) -> None:
    client = make_client(settings, STRIPE_ALLOWED_IPS=f"{ALLOWED}, 3.130.192.231")
    answer = post(client, ALLOWED, "evt_allowed")
    assert answer.status_code == 200, answer.json
    assert answer.json["duplicate"] is False
    assert written(clean_db) == (1, 1)


def test_a_disallowed_address_is_403_writes_nothing_and_is_counted_and_logged(
        settings: Settings, clean_db: Engine, caplog: pytest.LogCaptureFixture) -> None:
    client = make_client(settings, STRIPE_ALLOWED_IPS=ALLOWED)
    before = rejected()
    with caplog.at_level(logging.INFO, logger="webhooks.ingest.webhooks"):
        answer = post(client, DISALLOWED, "evt_refused")
    assert answer.status_code == 403
    assert answer.headers["Connection"] == "close"  # its body was never read
    assert written(clean_db) == (0, 0)
    assert rejected() - before == 1
    [line] = [record for record in caplog.records if record.getMessage() == "delivery rejected"]
    assert line.__dict__["address"] == DISALLOWED


class Unreadable:
    """A request body that fails the test if anything reads it."""

    def read(self, *args: object) -> bytes:
        raise AssertionError("the body was read")

    readline = readlines = read


def test_403_is_decided_before_the_size_limit_and_any_read_of_the_body(
        settings: Settings, clean_db: Engine) -> None:
    client = make_client(settings, STRIPE_ALLOWED_IPS=ALLOWED)
    _, signed = delivery("evt_huge")

    def huge(peer: str) -> int:
        environ = {"REMOTE_ADDR": peer, "wsgi.input": Unreadable(),
                   "CONTENT_LENGTH": str(1000 * MAX_BODY)}
        status: int = client.post("/webhooks/stripe", headers=signed,
                                  environ_overrides=environ).status_code
        return status

    assert huge(DISALLOWED) == 403
    assert huge(ALLOWED) == 413  # the same request from inside the list meets the size limit
    assert written(clean_db) == (0, 0)


def test_the_allowlist_comes_before_the_404_of_an_unconfigured_provider(
        settings: Settings, clean_db: Engine) -> None:
    # PADDLE has a list but no secret: outside the list, a sender cannot even learn that.
    client = make_client(settings, PADDLE_ALLOWED_IPS=ALLOWED)
    assert post(client, DISALLOWED, "evt_p", provider="paddle").status_code == 403
    assert post(client, ALLOWED, "evt_p", provider="paddle").status_code == 404
    assert post(client, DISALLOWED, "evt_p", provider="nope").status_code == 404


def test_providers_without_a_list_take_any_address(settings: Settings, clean_db: Engine) -> None:
    client = make_client(settings, GITHUB_ALLOWED_IPS=ALLOWED)
    assert post(client, DISALLOWED, "evt_any").status_code == 200


@pytest.mark.parametrize(("allowed", "inside", "outside"), [
    ("192.0.2.0/24", "192.0.2.77", "192.0.3.1"),
    ("2001:db8::/32", "2001:db8:ffff::5", "2001:db9::1"),
    ("2001:db8::7", "2001:db8::7", "2001:db8::8"),
    ("192.0.2.7", "::ffff:192.0.2.7", "::ffff:192.0.2.8"),  # a dual-stack socket's IPv4 peer
])
def test_cidr_ranges_and_ipv6(settings: Settings, clean_db: Engine, allowed: str, inside: str,
                              outside: str) -> None:
    client = make_client(settings, STRIPE_ALLOWED_IPS=f"198.51.100.1,{allowed}")
    assert post(client, outside, "evt_cidr").status_code == 403
    assert post(client, inside, "evt_cidr").status_code == 200
    assert written(clean_db) == (1, 1)


PROXY = "10.0.0.2"  # the reverse proxy, as the socket's peer


def test_without_trusted_proxies_x_forwarded_for_is_ignored(
        settings: Settings, clean_db: Engine) -> None:
    client = make_client(settings, STRIPE_ALLOWED_IPS=ALLOWED)
    assert post(client, PROXY, "evt_x", **{"X-Forwarded-For": ALLOWED}).status_code == 403
    assert written(clean_db) == (0, 0)


def test_one_trusted_proxy_takes_the_right_most_entry(settings: Settings,
                                                      clean_db: Engine) -> None:
    client = make_client(settings, STRIPE_ALLOWED_IPS=ALLOWED, TRUSTED_PROXIES="1")
    # The proxy appended the client it saw, ALLOWED.
    assert post(client, PROXY, "evt_a", **{"X-Forwarded-For": ALLOWED}).status_code == 200
    # A client at DISALLOWED wrote ALLOWED first; the proxy appended the real one.
    forged = post(client, PROXY, "evt_b", **{"X-Forwarded-For": f"{ALLOWED}, {DISALLOWED}"})
    assert forged.status_code == 403
    # The proxy's own address is not the client.
    assert post(client, ALLOWED, "evt_c", **{"X-Forwarded-For": DISALLOWED}).status_code == 403
    assert written(clean_db) == (1, 1)


def test_two_trusted_proxies_take_the_second_from_the_right(settings: Settings,
                                                           clean_db: Engine) -> None:
    client = make_client(settings, STRIPE_ALLOWED_IPS=ALLOWED, TRUSTED_PROXIES="2")
    chain = {"X-Forwarded-For": f"{DISALLOWED}, {ALLOWED}, {PROXY}"}
    assert post(client, "10.0.0.3", "evt_two", **chain).status_code == 200
    forged = {"X-Forwarded-For": f"{ALLOWED}, {DISALLOWED}, {PROXY}"}
    assert post(client, "10.0.0.3", "evt_forged", **forged).status_code == 403


def test_fewer_entries_than_trusted_proxies_fall_back_to_the_peer(
        settings: Settings, clean_db: Engine) -> None:
    client = make_client(settings, STRIPE_ALLOWED_IPS=ALLOWED, TRUSTED_PROXIES="2")
    one_entry = {"X-Forwarded-For": ALLOWED}
    assert post(client, DISALLOWED, "evt_short", **one_entry).status_code == 403
    assert post(client, ALLOWED, "evt_short", **{"X-Forwarded-For": DISALLOWED}).status_code \
        == 200
    assert post(client, ALLOWED, "evt_none").status_code == 200  # no header at all
    assert written(clean_db) == (2, 2)


def test_the_rotation_counter_counts_each_secret_position(
        settings: Settings, clean_db: Engine, caplog: pytest.LogCaptureFixture) -> None:
    client = make_client(settings, STRIPE_WEBHOOK_SECRET="whsec_rot_new, whsec_rot_old")
    first, second = verified("1"), verified("2")
    with caplog.at_level(logging.DEBUG, logger="webhooks.ingest.webhooks"):
        for n, secret in enumerate(["whsec_rot_old", "whsec_rot_new", "whsec_rot_old"]):
            body, headers = delivery(f"evt_rot_{n}", secret)
            assert client.post("/webhooks/stripe", data=body, headers=headers).status_code \
                == 200
        body, headers = delivery("evt_rot_0", "whsec_rot_old")  # a duplicate still counts
        duplicate = client.post("/webhooks/stripe", data=body, headers=headers).get_json()
        assert duplicate["duplicate"] is True
    assert verified("1") - first == 1
    assert verified("2") - second == 3
    positions = [record.__dict__.get("secret_position") for record in caplog.records
                 if record.getMessage() == "signature verified"]
    assert positions == ["2", "1", "2", "2"]
    assert "whsec_rot" not in caplog.text
    text = client.get("/metrics").get_data(as_text=True)
    assert ('webhooks_signature_verified_total{provider="stripe",secret="2",source="stripe"}'
            in text)


# The real server: granian's REMOTE_ADDR, IPv6 sockets, and /metrics across its processes.


@contextmanager
def web(settings: Settings, log: Path, host: str, **env: str) -> Iterator[int]:
    port = processes.free_port()
    full = {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
            "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "MAX_BODY_BYTES": str(MAX_BODY),
            "PORT": str(port), **env}
    process: subprocess.Popen[bytes] = processes.start(
        ["web", "--workers", "2", "--threads", "2", "--host", host], full, log)
    try:
        processes.wait_http(f"http://127.0.0.1:{port}/healthz" if host != "::1"
                            else f"http://[::1]:{port}/healthz")
        yield port
    finally:
        processes.stop(process)


def send(base: str, event_id: str, secret: str = STRIPE_SECRET, **headers: str) -> Any:
    body, signed = delivery(event_id, secret)
    return requests.post(f"{base}/webhooks/stripe", data=body, headers={**signed, **headers},
                         timeout=10)


def raw_oversized(host: str, port: int) -> str:
    """The status line for a request that announces a body far over the limit and sends
    none of it."""
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(f"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Length: "
                     f"{1000 * MAX_BODY}\r\nStripe-Signature: t=1,v1=00\r\n\r\n".encode())
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            assert chunk, "the connection closed without an answer"
            answer += chunk
        return answer.split(b"\r\n")[0].decode()


def test_real_server_refuses_outside_the_list_and_counts_rotation(
        settings: Settings, clean_db: Engine, tmp_path: Path) -> None:
    env = {"STRIPE_ALLOWED_IPS": "127.0.0.1", "GITHUB_ALLOWED_IPS": DISALLOWED,
           "STRIPE_WEBHOOK_SECRET": f"whsec_next,{STRIPE_SECRET}"}
    with web(settings, tmp_path / "web.log", "127.0.0.1", **env) as port:
        base = f"http://127.0.0.1:{port}"
        assert send(base, "evt_real_old").status_code == 200  # the old secret: position 2
        assert send(base, "evt_real_new", "whsec_next").status_code == 200
        body = b'{"zen": "x"}'
        refused = requests.post(f"{base}/webhooks/github", data=body, timeout=10)
        assert refused.status_code == 403
        assert raw_oversized("127.0.0.1", port).startswith("HTTP/1.1 413")  # allowed: size
        metrics = requests.get(f"{base}/metrics", timeout=10).text
    assert written(clean_db) == (2, 2)
    for position in ("1", "2"):
        assert (f'webhooks_signature_verified_total{{provider="stripe",secret="{position}",'
                'source="stripe"} 1.0' in metrics)
    # github has an allowlist but no secret: no source of it is configured.
    assert ('webhooks_deliveries_rejected_total{provider="github",reason="source_ip",'
            'source="unknown"} 1.0' in metrics)
    assert "source address 127.0.0.1 is not allowed for github" in (tmp_path / "web.log"
                                                                     ).read_text()


def test_real_server_403_comes_before_the_size_limit(settings: Settings, clean_db: Engine,
                                                     tmp_path: Path) -> None:
    with web(settings, tmp_path / "web.log", "127.0.0.1",
             STRIPE_ALLOWED_IPS=DISALLOWED) as port:
        assert raw_oversized("127.0.0.1", port).startswith("HTTP/1.1 403")
        assert send(f"http://127.0.0.1:{port}", "evt_out").status_code == 403
    assert written(clean_db) == (0, 0)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback (::1)")
def test_real_server_on_a_dual_stack_socket(settings: Settings, clean_db: Engine,
                                            tmp_path: Path) -> None:
    """Listening on "::", an IPv6 client is ::1 and an IPv4 client arrives as
    ::ffff:127.0.0.1 (or 127.0.0.1): the IPv4 entry matches either way."""
    with web(settings, tmp_path / "web.log", "::", STRIPE_ALLOWED_IPS="127.0.0.1") as port:
        assert send(f"http://127.0.0.1:{port}", "evt_v4").status_code == 200
        assert send(f"http://[::1]:{port}", "evt_v6").status_code == 403
    with web(settings, tmp_path / "web6.log", "::", STRIPE_ALLOWED_IPS="::1") as port:
        assert send(f"http://[::1]:{port}", "evt_v6").status_code == 200
        assert send(f"http://127.0.0.1:{port}", "evt_v4_out").status_code == 403
    assert written(clean_db) == (2, 2)


# Named sources (issue 36, item 8a): a source without a list of its own takes its
# provider's, and a path's answer tells an outsider nothing of which source names exist.

CONNECT_SECRET = "whsec_connect_allowlist_secret"


def sourced_client(settings: Settings, **env: str) -> FlaskClient:
    return make_client(settings, STRIPE_SOURCES="connect,eu",
                       STRIPE_CONNECT_WEBHOOK_SECRET=CONNECT_SECRET,
                       STRIPE_EU_WEBHOOK_SECRET="whsec_eu_allowlist_secret", **env)


def post_to(client: FlaskClient, path: str, peer: str, event_id: str,
            secret: str = STRIPE_SECRET, **environ: Any) -> Any:
    body, signed = delivery(event_id, secret)
    return client.post(f"/webhooks/{path}", data=body, headers=signed,
                       environ_base={"REMOTE_ADDR": peer, **environ})


def test_a_named_source_without_its_own_list_takes_its_providers(
        settings: Settings, clean_db: Engine) -> None:
    client = sourced_client(settings, STRIPE_ALLOWED_IPS=ALLOWED,
                            STRIPE_EU_ALLOWED_IPS="192.0.2.0/24")
    refused = post_to(client, "stripe/connect", DISALLOWED, "evt_c1", CONNECT_SECRET)
    assert refused.status_code == 403, refused.json
    assert post_to(client, "stripe/connect", ALLOWED, "evt_c2", CONNECT_SECRET
                   ).status_code == 200
    # A source with a list of its own takes that one alone.
    assert post_to(client, "stripe/eu", ALLOWED, "evt_e1", "whsec_eu_allowlist_secret"
                   ).status_code == 403
    assert post_to(client, "stripe/eu", "192.0.2.5", "evt_e2", "whsec_eu_allowlist_secret"
                   ).status_code == 200
    assert written(clean_db) == (2, 2)


def answers(client: FlaskClient, path: str, peer: str) -> list[tuple[int, Any]]:
    """What an outsider gets at a path: unsigned, signed with a secret it guessed, too big,
    and without a signature header."""
    body, _ = delivery("evt_probe")
    found = []
    for headers, environ in [
            ({"Stripe-Signature": "t=1,v1=00"}, {}),
            (delivery("evt_probe", "whsec_guessed")[1], {}),
            (delivery("evt_probe", "whsec_guessed")[1],
             {"wsgi.input": Unreadable(), "CONTENT_LENGTH": str(1000 * MAX_BODY)}),
            ({}, {})]:
        answer = client.post(f"/webhooks/{path}", data=body, headers=headers,
                             environ_overrides={"REMOTE_ADDR": peer, **environ})
        found.append((answer.status_code, answer.get_json()))
    return found


@pytest.mark.parametrize("lists", [{}, {"STRIPE_ALLOWED_IPS": ALLOWED}])
@pytest.mark.parametrize("peer", [ALLOWED, DISALLOWED])
def test_a_configured_and_an_unknown_source_name_answer_alike(
        settings: Settings, clean_db: Engine, lists: dict[str, str], peer: str) -> None:
    client = sourced_client(settings, **lists)
    configured = answers(client, "stripe/connect", peer)
    for unknown in ("nosuch", "stripe"):  # the 403's text names the path it was sent to
        named = [(status, json.loads(json.dumps(body).replace(f"stripe/{unknown}",
                                                              "stripe/connect")))
                 for status, body in answers(client, f"stripe/{unknown}", peer)]
        assert named == configured, unknown
    assert {status for status, _ in configured} <= {400, 403, 413}
    assert written(clean_db) == (0, 0)
    # A provider with no source configured is 404, as it always was: nothing to hide.
    assert post_to(client, "paddle/connect", ALLOWED, "evt_p").status_code == 404


def test_an_unknown_source_is_counted_and_logged_as_not_configured(
        settings: Settings, clean_db: Engine, caplog: pytest.LogCaptureFixture) -> None:
    client = sourced_client(settings)
    before = rejected(reason="not_configured", source="unknown")
    signature = rejected(reason="signature", source="unknown")
    with caplog.at_level(logging.INFO, logger="webhooks.ingest.webhooks"):
        # Even signed with a configured source's secret, an unknown path records nothing.
        answer = post_to(client, "stripe/nosuch", ALLOWED, "evt_n", CONNECT_SECRET)
    assert answer.status_code == 400
    assert rejected(reason="not_configured", source="unknown") - before == 1
    assert rejected(reason="signature", source="unknown") == signature
    [line] = [record for record in caplog.records if record.getMessage() == "delivery rejected"]
    assert "stripe/nosuch" in line.__dict__["reason"]
    assert written(clean_db) == (0, 0)
