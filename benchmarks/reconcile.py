"""`--only reconcile`: how fast reconciliation records events the provider has but never
delivered, beside the delivery path's rate in the same run.

- delivery path: `webhooks web` at the ingest scenario's concurrency (closed loop), acked/s;
- reconciliation: the fake Stripe API (tests/fakes/provider_apis.py, real HTTP) holding N
  `invoice.paid` events built from Stripe's published invoice (about 6 KB each, decimal
  strings included), none of which was delivered, and one older event (the forward
  paging's anchor), and the real `webhooks reconcile stripe` process recording them all:
  events recorded per second of its run (listing included), and the same for a second run
  that finds them all recorded.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from benchmarks import load, stack
from benchmarks.events import CUSTOMERS
from tests.fakes import provider_events
from tests.fakes.provider_apis import STRIPE_KEY, FakeProviderApis

EVENTS = 10_000
SMOKE_EVENTS = 500


def run(target: stack.Target, *, events: int, connections: int, seconds: float,
        prefer_wrk: bool) -> dict[str, Any]:
    stack.reset(target)
    with stack.web(target) as (base, _):
        load.closed_loop(base, connections, min(seconds, 2), stack.STRIPE_SECRET, prefer_wrk)
        delivered = load.closed_loop(base, connections, seconds, stack.STRIPE_SECRET,
                                     prefer_wrk)
    stack.reset(target)
    created = int(time.time()) - 3600
    with FakeProviderApis() as api:
        older = _event(events, created - 7 * 86_400)  # before the 72-hour window
        api.state.stripe_events = [_event(n, created + n // 10) for n in range(events)]
        api.state.stripe_events.append(older)
        first = _reconcile(target, api.url)
        second = _reconcile(target, api.url)
    rate = first["recorded"] / first["seconds"] if first["seconds"] else 0.0
    return {
        "events": events, "delivery_acked_per_s": round(delivered.rps, 1),
        "delivery": delivered.summary(), "first_run": first, "second_run": second,
        "reconciled_per_s": round(rate, 1),
        "ratio_to_delivery": round(rate / delivered.rps, 3) if delivered.rps else None,
    }


def _event(n: int, created: int) -> dict[str, Any]:
    invoice = provider_events.stripe_object(
        "invoice", id=f"in_missed_{n}", customer=f"cus_{n % CUSTOMERS}", amount_paid=1999,
        amount_due=1999, status="paid", customer_email="buyer@example.com")
    return provider_events.stripe_event("invoice.paid", invoice, event_id=f"evt_missed_{n}",
                                        created=created)


def _reconcile(target: stack.Target, api_url: str) -> dict[str, Any]:
    env = {**target.env, "STRIPE_API_KEY": STRIPE_KEY, "STRIPE_API_BASE": api_url}
    started = time.monotonic()
    result = subprocess.run(stack.webhooks_command(target, "reconcile", "stripe"),
                            env={**os.environ, **env}, cwd=target.code,
                            capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"webhooks reconcile failed: {result.stderr.strip()[-500:]}")
    listed, already, recorded = (int(part.split()[-1]) for part in
                                 result.stdout.strip().split(", "))
    return {"seconds": round(seconds, 2), "listed": listed, "already": already,
            "recorded": recorded}


def print_summary(result: dict[str, Any]) -> None:
    first, second = result["first_run"], result["second_run"]
    print(f"  delivery path   {result['delivery_acked_per_s']:>9,.1f} acked/s (webhooks web)")
    print(f"  reconciliation  {result['reconciled_per_s']:>9,.1f} events/s: {first['recorded']:,}"
          f" of {first['listed']:,} missed events recorded in {first['seconds']} s")
    print(f"  ratio reconciliation/delivery {result['ratio_to_delivery']}")
    print(f"  second run: listed {second['listed']:,}, recorded {second['recorded']} in "
          f"{second['seconds']} s")
