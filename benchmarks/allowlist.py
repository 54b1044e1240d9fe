"""`python -m benchmarks.allowlist [--quick] [--json FILE]`: what the source-address check
(`<PROVIDER>_ALLOWED_IPS`, ingest/allowlist.py) costs per request.

Two measurements, on realistic lists (Stripe's 12 published webhook addresses, GitHub's
`hooks` ranges from api.github.com/meta, IPv4 and IPv6):

- the check alone, per address: ingest.allowlist.Allowlist beside the obvious way
  (`ipaddress.ip_address(a)` tested against each `ip_network`), for an exact hit, a miss,
  a range hit, an IPv6 one and an IPv4-mapped one;
- the rotation counter's increment, which every verified delivery adds;
- the ingest app's whole request through Flask's test client, without a list and with one
  (and with TRUSTED_PROXIES=1, which adds werkzeug's ProxyFix), on a delivery refused at its
  signature: the path that reads the body and verifies but never reaches the database, so
  the difference is the allowlist's and not Postgres's. Also a refusal at 403.

Needs no server: the app's engine and broker are never used on these paths. Variants are
measured in alternation, in many short rounds, and the best round is printed, in this
process's CPU time (the machine's speed drifts and its cores are shared; the minimum is the
least disturbed). Never fails on a threshold.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import time
import timeit
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from webhooks.ingest.allowlist import Allowlist

STRIPE_WEBHOOK_IPS = (  # https://stripe.com/files/ips/ips_webhooks.txt
    "3.18.12.63", "3.130.192.231", "13.235.14.237", "13.235.122.149", "18.211.135.69",
    "35.154.171.200", "52.15.183.38", "54.88.130.119", "54.88.130.237", "54.187.174.169",
    "54.187.205.235", "54.187.216.72",
)
GITHUB_HOOKS = (  # "hooks" of https://api.github.com/meta
    "192.30.252.0/22", "185.199.108.0/22", "140.82.112.0/20", "143.55.64.0/20",
    "2a0a:a440::/29", "2606:50c0::/32",
)
CHECKS = (  # (name, list, address)
    ("stripe, exact hit (last of 12)", STRIPE_WEBHOOK_IPS, "54.187.216.72"),
    ("stripe, miss", STRIPE_WEBHOOK_IPS, "203.0.113.9"),
    ("stripe, IPv4-mapped hit", STRIPE_WEBHOOK_IPS, "::ffff:54.187.216.72"),
    ("github, range hit (3rd of 6)", GITHUB_HOOKS, "140.82.115.4"),
    ("github, IPv6 range hit", GITHUB_HOOKS, "2606:50c0:8000::154"),
    ("github, miss", GITHUB_HOOKS, "203.0.113.9"),
)


def naive(entries: tuple[str, ...]) -> Callable[[str], bool]:
    """The obvious check, for comparison: parse with ipaddress, test each network."""
    networks = [ipaddress.ip_network(entry) for entry in entries]

    def allows(address: str) -> bool:
        ip = ipaddress.ip_address(address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in network for network in networks)

    return allows


def best_us(call: Callable[[], object], number: int, rounds: int) -> float:
    """The best of rounds, in microseconds of this process's CPU per call (CPU time, not
    wall time: other processes sharing the cores do not count)."""
    times = timeit.repeat(call, number=number, repeat=rounds, timer=time.process_time)
    return min(times) / number * 1e6


def measure_checks(number: int, rounds: int) -> list[dict[str, Any]]:
    rows = []
    for name, entries, address in CHECKS:
        ours = Allowlist(ipaddress.ip_network(entry) for entry in entries)
        theirs = naive(entries)
        assert ours.allows(address) == theirs(address), name
        rows.append({"check": name, "allowed": ours.allows(address),
                     "allowlist_us": round(best_us(partial(ours.allows, address),
                                                   number, rounds), 3),
                     "naive_ipaddress_us": round(best_us(partial(theirs, address),
                                                         number, rounds), 3)})
    return rows


def _count_secret(provider: str, index: int) -> None:
    """What the ingest adds to each verified delivery for the rotation counter."""
    from webhooks.shared import metrics

    metrics.signature_verified.labels(provider, str(index + 1)).inc()


# (name, environment, peer, X-Forwarded-For, expected status)
APP_VARIANTS: tuple[tuple[str, dict[str, str], str, str | None, int], ...] = (
    ("no list (before)", {}, "54.187.216.72", None, 400),
    ("stripe list, exact hit", {"STRIPE_ALLOWED_IPS": ",".join(STRIPE_WEBHOOK_IPS)},
     "54.187.216.72", None, 400),
    ("github ranges as stripe's list, range hit",
     {"STRIPE_ALLOWED_IPS": ",".join(GITHUB_HOOKS)}, "140.82.115.4", None, 400),
    ("stripe list, TRUSTED_PROXIES=1",
     {"STRIPE_ALLOWED_IPS": ",".join(STRIPE_WEBHOOK_IPS), "TRUSTED_PROXIES": "1"},
     "10.0.0.2", "54.187.216.72", 400),
    ("stripe list, refused: 403", {"STRIPE_ALLOWED_IPS": ",".join(STRIPE_WEBHOOK_IPS)},
     "203.0.113.9", None, 403),
)


def _client(env: dict[str, str]) -> Any:
    import logging

    from webhooks.ingest.app import create_app
    from webhooks.shared.settings import Settings

    logging.getLogger("webhooks.ingest.webhooks").setLevel(logging.WARNING)  # no log I/O measured
    settings = Settings.from_env({
        "DATABASE_URL": "postgresql://bench@127.0.0.1:9/unused",
        "BROKER_URL": "redis://127.0.0.1:9/0",
        "STRIPE_WEBHOOK_SECRET": "whsec_bench", **env})
    return create_app(settings).test_client()


def measure_app(number: int, rounds: int) -> list[dict[str, Any]]:
    body = json.dumps({"id": "evt_bench", "type": "invoice.paid", "data": {
        "object": {"id": "in_1", "customer": "cus_1", "amount_paid": 1000}}}).encode()
    # A well-formed header under another secret: the request reads its body and runs the
    # stripe library's verification, then is refused (400) before any database access.
    headers = {"Stripe-Signature": f"t={int(time.time())},v1={'0' * 64}",
               "Content-Type": "application/json"}
    calls = {}
    for name, env, peer, forwarded, status in APP_VARIANTS:
        client = _client(env)
        sent = {**headers, **({"X-Forwarded-For": forwarded} if forwarded else {})}

        def call(client: Any = client, sent: dict[str, str] = sent, peer: str = peer) -> int:
            answer: int = client.post("/webhooks/stripe", data=body, headers=sent,
                                      environ_base={"REMOTE_ADDR": peer}).status_code
            return answer

        assert call() == status, (name, call())
        calls[name] = call
    best = {name: float("inf") for name in calls}
    for _ in range(rounds):  # alternate the variants, round after round
        for name, call in calls.items():
            best[name] = min(best[name], best_us(call, number, 1))
    before = best[APP_VARIANTS[0][0]]
    return [{"request": name, "us_per_request": round(us, 1),
             "added_us": round(us - before, 1)} for name, us in best.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.allowlist",
                                     description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="fewer calls (a few seconds)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    checks_n, checks_rounds, app_n, app_rounds = ((20_000, 3, 100, 5) if args.quick
                                                  else (50_000, 7, 200, 40))

    print("== the check alone: CPU microseconds per call (best of rounds)")
    checks = measure_checks(checks_n, checks_rounds)
    print(f"{'check':38} {'allowed':>7} {'allowlist':>10} {'ipaddress':>10}")
    for row in checks:
        print(f"{row['check']:38} {row['allowed']!s:>7} {row['allowlist_us']:>10.3f} "
              f"{row['naive_ipaddress_us']:>10.3f}")

    counter = round(best_us(partial(_count_secret, "stripe", 1), checks_n, checks_rounds), 3)
    print(f"{'rotation counter (signature_verified.inc)':38} {'':>7} {counter:>10.3f}")

    print("\n== the ingest's request (Flask test client, refused at its signature: no "
          "database): CPU microseconds per request")
    app = measure_app(app_n, app_rounds)
    print(f"{'request':44} {'us/request':>10} {'added':>8}")
    for row in app:
        print(f"{row['request']:44} {row['us_per_request']:>10.1f} {row['added_us']:>+8.1f}")
    if args.json:
        args.json.write_text(json.dumps({"started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                         "checks": checks, "counter_us": counter, "app": app},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
