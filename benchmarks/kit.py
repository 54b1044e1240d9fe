"""`python -m benchmarks --only kit`: how long the test kit (`webhooks check-handlers`,
webhooks/testing/) takes to check 50 events under 50 schedules, against the SPEC's bound
("Testing an app's handlers": within 60 s on the 2-core reference machine).

Two apps, each on a database of the kit's own, created next to the benchmark's and dropped
after: the reference app (`webhooks.ledger`) with Stripe events built from
examples/stripe/*.json, each id its own (invoices paid, both event types of each; charges
refunded; subscriptions created then updated; five customers, so that two
batches' handlers meet on one account), and the example app (`examples.acme_billing`) with
the `invoice.paid` and `invoice.payment_succeeded` pairs it handles. Each app's column that
differs by which event came first is left out (`--ignore`). Per app: the seconds of
`check` (the reference and the schedules), and of the whole (the database created and
migrated, the check, the database dropped), as `webhooks check-handlers` spends them.
The kit runs in this process: it measures this checkout's code, whatever `--code` names.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import cycle
from typing import Any

from benchmarks import stack
from webhooks import testing

EVENTS = 50
SCHEDULES = 50
SMOKE = {"events": 4, "schedules": 3}
SEED = 1
BOUND_SECONDS = 60.0  # SPEC: 50 events under 50 schedules on the 2-core reference machine
CUSTOMERS = 5
EXAMPLES = stack.ROOT / "examples" / "stripe"


def _example(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((EXAMPLES / name).read_text())
    return payload


def _made(template: str, event_id: str, created: int, **fields: Any) -> testing.Event:
    """The example event `template` with its own id, its `created`, and data.object's
    `fields` replaced."""
    payload = copy.deepcopy(_example(template))
    payload.update(id=event_id, created=created)
    payload["data"]["object"].update(fields)
    return testing.event(payload)


def _invoice(n: int) -> list[testing.Event]:
    fields = {"id": f"in_bench_{n}", "customer": f"cus_bench_{n % CUSTOMERS}",
              "amount_paid": 1000 + 37 * n, "customer_email": f"buyer{n}@example.com"}
    return [_made("invoice_paid.json", f"evt_bench_in_{n}_paid", 1767225600 + n, **fields),
            _made("invoice_payment_succeeded.json", f"evt_bench_in_{n}_succeeded",
                  1767225600 + n, **fields)]


def _refunds(n: int) -> list[testing.Event]:
    """Two charges refunded, each in one step: a charge refunded in two steps books one
    entry or two by the order its events arrive in (the same balance), which the kit
    reports (benchmarks/results/README.md, 2026-12-06)."""
    return [_made("charge_refunded_full.json", f"evt_bench_ch_{n}_{half}_full",
                  1767225800 + n, id=f"ch_bench_{n}_{half}",
                  customer=f"cus_bench_{(n + half) % CUSTOMERS}", amount_refunded=1000 + n)
            for half in (0, 1)]


def _subscription(n: int) -> list[testing.Event]:
    sub = {"id": f"sub_bench_{n}", "customer": f"cus_bench_{n % CUSTOMERS}"}
    return [_made("subscription_created.json", f"evt_bench_sub_{n}_created", 1767225600 + n,
                  **sub),
            _made("subscription_updated.json", f"evt_bench_sub_{n}_updated", 1767312000 + n,
                  **sub)]


def _taken(groups: Iterator[list[testing.Event]], count: int) -> list[testing.Event]:
    events: list[testing.Event] = []
    while len(events) < count:
        events += next(groups)
    return events[:count]


def ledger_events(count: int) -> list[testing.Event]:
    """`count` events of the reference app's types, an object's events together: an
    invoice's two, two charges' refunds, a subscription's two, invoices twice as often."""
    kinds = cycle((_invoice, _refunds, _invoice, _subscription))
    return _taken((kind(n) for n, kind in enumerate(kinds)), count)


def acme_events(count: int) -> list[testing.Event]:
    """`count` events of the example app's types: each invoice's two."""
    return _taken((_invoice(n) for n in range(count)), count)


@dataclass(frozen=True)
class Case:
    name: str
    app: str
    ignore: tuple[str, ...]  # the columns that differ by which event came first
    events: Callable[[int], list[testing.Event]]


CASES = (Case("reference app", "webhooks.ledger", ("ledger_entries.event_id",), ledger_events),
         Case("example app", "examples.acme_billing", ("acme_paid_invoices.event_id",),
              acme_events))


def run(target: stack.Target, events: int = EVENTS, schedules: int = SCHEDULES,
        ) -> dict[str, Any]:
    results: dict[str, Any] = {"events": events, "schedules": schedules, "seed": SEED,
                               "bound_seconds": BOUND_SECONDS, "apps": []}
    for case in CASES:
        started = time.monotonic()
        with testing.database(target.database_url) as url, \
                testing.Kit(url, [case.app], ignore=case.ignore) as kit:
            ready = time.monotonic()
            result = testing.check(kit, case.events(events), schedules_count=schedules,
                                   seed=SEED)
        whole = time.monotonic() - started
        results["apps"].append({
            "name": case.name, "app": case.app, "ignore": list(case.ignore),
            "ok": result.ok, "check_seconds": round(result.seconds, 2),
            "setup_seconds": round(ready - started, 2), "whole_seconds": round(whole, 2),
            # a failed check stops at its first failing schedule: no per-schedule figure
            "per_schedule_seconds": round(result.seconds / (schedules + 1), 3)
            if result.ok else None,
            "report": None if result.ok else result.report()})
    return results


def print_summary(result: dict[str, Any]) -> None:
    for app in result["apps"]:
        verdict = "ok" if app["ok"] else "FAILED"
        print(f"  {app['name']} ({app['app']}): {result['events']} events under "
              f"{result['schedules']} schedules: {verdict}, {app['whole_seconds']} s in all "
              f"(check {app['check_seconds']} s, database and migrations "
              f"{app['setup_seconds']} s; bound {result['bound_seconds']:.0f} s)")
        if app["report"]:
            print("    " + app["report"].replace("\n", "\n    "))

