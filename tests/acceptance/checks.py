"""The end state every scenario checks: for the events of a World, the database and the
fake Postmark must hold exactly what delivering each logical event once would give.

Reads only the tables and columns of the public data model (webhook_events, jobs, accounts,
ledger_entries, subscriptions, outbox) and what the fake Postmark recorded, and runs
`webhooks audit`, which must hold; for a system behind PgBouncer, also what PgBouncer and
pg_stat_activity say of the path to Postgres.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from tests.acceptance.harness import ROOT, System
from tests.acceptance.senders import Answer
from tests.acceptance.world import World
from webhooks.shared import db


def _diff(name: str, got: dict[Any, Any], want: dict[Any, Any], limit: int = 8) -> str:
    wrong = [(k, got.get(k), want.get(k)) for k in set(got) | set(want)
             if got.get(k) != want.get(k)]
    shown = ", ".join(f"{k}: got {g!r}, want {w!r}" for k, g, w in sorted(wrong, key=str)[:limit])
    return f"{name}: {len(wrong)} wrong ({shown})"


def assert_exactly_once(system: System, world: World) -> dict[str, Any]:
    """Every event of `world` recorded once and applied once; every email sent once.
    Returns counts for the report."""
    failures = []

    events = {(r.provider, r.event_id) for r in system.rows(
        "SELECT provider, event_id FROM webhook_events")}
    if events != world.keys:
        failures.append(f"webhook_events: {len(events - world.keys)} unexpected, "
                        f"{len(world.keys - events)} missing")

    jobs = system.rows("SELECT provider, event_id, status, attempts, last_error FROM jobs")
    per_event = Counter((j.provider, j.event_id) for j in jobs)
    if per_event != Counter(world.keys):
        failures.append(f"jobs: {len(jobs)} rows for {len(world.keys)} events")
    not_done = [(j.event_id, j.status, j.last_error) for j in jobs if j.status != "done"]
    if not_done:
        failures.append(f"jobs not done: {len(not_done)}, e.g. {not_done[:3]}")

    balances = {(r.customer_id, r.currency): int(r.balance) for r in system.rows(
        "SELECT customer_id, currency, balance FROM accounts")}
    want_balances = dict(world.balances)
    if balances != want_balances:
        failures.append(_diff("accounts.balance", balances, want_balances))

    ledger = system.rows("SELECT customer_id, currency, amount, provider, event_id "
                         "FROM ledger_entries")
    credits: dict[str, list[int]] = defaultdict(list)
    refunded: Counter[str] = Counter()
    slow_credits: dict[str, list[int]] = defaultdict(list)
    strays = []
    for row in ledger:
        if row.event_id in world.invoice_of_event:
            credits[world.invoice_of_event[row.event_id]].append(int(row.amount))
        elif row.event_id in world.charge_of_event:
            refunded[world.charge_of_event[row.event_id]] -= int(row.amount)
        elif row.event_id in world.slow_credits:
            slow_credits[row.event_id].append(int(row.amount))
        else:
            strays.append(row.event_id)
    want_credits = {i: [amount] for i, (_, _, amount) in world.invoices.items()}
    if dict(credits) != want_credits:
        failures.append(_diff("ledger credits per invoice", dict(credits), want_credits))
    want_slow = {event_id: [100] for event_id in world.slow_credits}
    if dict(slow_credits) != want_slow:
        failures.append(_diff("ledger entries per test.slow_credit", dict(slow_credits),
                              want_slow))
    if dict(refunded) != world.refunds:
        failures.append(_diff("ledger debits per charge", dict(refunded), world.refunds))
    if strays:
        failures.append(f"ledger rows of no money event: {strays[:5]}")

    subscriptions = {r.subscription_id: r.status for r in system.rows(
        "SELECT subscription_id, status FROM subscriptions")}
    if subscriptions != world.subscriptions:
        failures.append(_diff("subscriptions.status", subscriptions, world.subscriptions))

    outbox = {r.idempotency_key: r.status for r in system.rows(
        "SELECT idempotency_key, status FROM outbox")}
    want_outbox = dict.fromkeys(world.emails, "sent")
    if outbox != want_outbox:
        failures.append(_diff("outbox.status", outbox, want_outbox))

    snapshot = system.postmark_messages()
    by_key = snapshot["by_key"]
    want_by_key = dict.fromkeys(world.emails, 1)
    if by_key != want_by_key:
        failures.append(_diff("Postmark messages per idempotency key", by_key, want_by_key))
    recipients = {m["Metadata"]["idempotency_key"]: m["To"] for m in snapshot["messages"]}
    if recipients != world.emails:
        failures.append(_diff("Postmark recipient per key", recipients, world.emails))

    audited = audit(system)
    if audited.returncode != 0:
        failures.append(f"webhooks audit exited {audited.returncode}:\n"
                        f"{audited.stdout[-3000:]}{audited.stderr[-2000:]}")

    assert not failures, "\n".join(failures) + "\n" + system.logs(15)
    return {
        "events": len(world.keys),
        "jobs_done": len(jobs),
        "ledger_rows": len(ledger),
        "accounts": len(balances),
        "subscriptions": len(subscriptions),
        "emails": len(by_key),
        "messages_per_key": sorted(set(by_key.values())),
        "postmark_requests": snapshot["requests"],
    }


def audit(system: System) -> subprocess.CompletedProcess[str]:
    """`webhooks audit` run as an operator runs it, against the system's database, with the
    workers' handlers (and so their audit checks): guarantee 11 says it exits 0 on every
    database these scenarios leave."""
    return subprocess.run(["webhooks", "audit"], env=system.env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def assert_one_first_delivery(answers: Iterable[Answer]) -> None:
    """Among the 200s of each event exactly one says duplicate: false."""
    firsts: Counter[tuple[str, str]] = Counter()
    seen: set[tuple[str, str]] = set()
    for answer in answers:
        if answer.status == 200:
            seen.add(answer.key)
            firsts[answer.key] += answer.duplicate is False
    wrong = {key: firsts[key] for key in seen if firsts[key] != 1}
    assert not wrong, f"events without exactly one first delivery: {list(wrong.items())[:5]}"


def statuses(answers: Iterable[Answer]) -> dict[int, int]:
    return dict(sorted(Counter(answer.status for answer in answers).items()))


def pooled_transactions(system: System) -> int:
    """Transactions the system's PgBouncer has passed on to its database so far."""
    assert system.pgbouncer is not None, "a pooled System"
    return system.pgbouncer.transactions("webhooks")


def assert_through_the_pooler(system: System, transactions_before: int, at_least: int) -> None:
    """The processes reached Postgres only through the system's PgBouncer: it passed on at
    least `at_least` transactions since `transactions_before`, and every session of theirs
    on the server (shared.db.APPLICATION_NAME) is one PgBouncer opened. A process that
    connected direct would show as a session from a port PgBouncer does not hold."""
    assert system.pgbouncer is not None, "a pooled System"
    passed = pooled_transactions(system) - transactions_before
    assert passed >= at_least, f"PgBouncer passed on {passed} transactions, not {at_least}"

    def sessions() -> tuple[int, list[int]]:
        ports = [int(row.client_port) for row in system.rows(
            "SELECT coalesce(client_port, -1) AS client_port FROM pg_stat_activity "
            "WHERE application_name = :name AND datname = current_database()",
            name=db.APPLICATION_NAME)]
        pooled = system.pgbouncer.server_ports()  # type: ignore[union-attr]
        return sum(port in pooled for port in ports), [p for p in ports if p not in pooled]

    # A session PgBouncer closes between the two reads is no bypass: read until stable.
    pooled, direct = sessions()
    for _ in range(20):
        if not direct:
            break
        time.sleep(0.5)
        pooled, direct = sessions()
    assert pooled > 0 and not direct, f"{pooled} sessions through PgBouncer, direct: {direct}"
