"""`python -m benchmarks.audit [--events N] [--explain]`: how long `webhooks audit` takes on a
large database, check by check (SPEC: within 60 s at 200,000 events on 2 cores).

Fills a throwaway database, set-based (generate_series, one statement per table), with N
events (default 1,000,000) and what the reference handlers leave behind for them, all as
they write it: Stripe's published objects (tests/fakes/provider_events.py) for payloads;
each paid invoice twice (invoice.paid and invoice.payment_succeeded), one ledger entry and
one sent receipt; charges refunded in two steps (two events, two refund entries);
subscriptions created then updated; payment-failed emails; GitHub pushes with no effect;
every job done, and the accounts' balances the sums of their entries. Then VACUUM ANALYZE,
and the audit as `webhooks audit` runs it (every check, then with `--since` one day), each
timed; `--explain` prints each check's plan (EXPLAIN ANALYZE) too. The database must hold:
a violation found is an error of the benchmark. Results go to results/history/ as
DATE-COMMIT-audit.json and results/README.md's audit table.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchmarks import report, stack
from tests.fakes import provider_events
from webhooks.shared import audit, hooks, queries

DATABASE = "webhooks_bench_audit"
CUSTOMERS = 20_000
SPREAD_DAYS = 30  # events received over the last SPREAD_DAYS, oldest first

# Of N events: invoices (two events each), charges (two), subscriptions (two), failed
# payments (one); the rest are GitHub pushes.
SHARES = {"invoices": 0.30, "charges": 0.05, "subscriptions": 0.05, "payment_failed": 0.05}


def templates() -> dict[str, str]:
    """The published Stripe objects and envelope, as JSON, that the fill varies."""
    envelope = provider_events.stripe_event("invoice.paid", {}, event_id="evt", created=0)
    return {"envelope": json.dumps(envelope),
            **{kind: json.dumps(provider_events.stripe_object(kind))
               for kind in ("invoice", "charge", "subscription")},
            "push": json.dumps(provider_events.published("github/push.payload.json"))}


# One Stripe event per row of `source` (n, event_type, object, created offset).
EVENTS = """
    INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                received_at)
    SELECT 'stripe', 'stripe', 'evt_' || kind || '_' || n || '_' || step, event_type,
           CAST(:envelope AS jsonb) || jsonb_build_object(
               'id', 'evt_' || kind || '_' || n || '_' || step, 'type', event_type,
               'created', extract(epoch FROM at)::bigint, 'data',
               jsonb_build_object('object', CAST(:template AS jsonb) || object)),
           at
    FROM ({source}) AS source
"""

SOURCES = {
    "invoices": """
        SELECT 'in' AS kind, n, step, t AS event_type,
               jsonb_build_object('id', 'in_' || n, 'customer', 'cus_' || n % :customers,
                                  'currency', 'usd', 'amount_paid', 100 + n % 9000,
                                  'amount_due', 100 + n % 9000,
                                  'customer_email', 'buyer' || n % :customers || '@example.com')
                   AS object,
               now() - make_interval(secs => (:total - n) * :seconds_per) AS at
        FROM generate_series(1, :count) AS n,
             unnest(ARRAY['invoice.paid', 'invoice.payment_succeeded']) WITH ORDINALITY
                 AS types (t, step)""",
    "charges": """
        SELECT 'ch' AS kind, n, step, 'charge.refunded' AS event_type,
               jsonb_build_object('id', 'ch_' || n, 'customer', 'cus_' || n % :customers,
                                  'currency', 'usd', 'amount_refunded', refunded) AS object,
               now() - make_interval(secs => (:total - n) * :seconds_per) AS at
        FROM generate_series(1, :count) AS n,
             unnest(ARRAY[300, 500]) WITH ORDINALITY AS levels (refunded, step)""",
    "subscriptions": """
        SELECT 'sub' AS kind, n, step, t AS event_type,
               jsonb_build_object('id', 'sub_' || n, 'customer', 'cus_' || n % :customers,
                                  'status', status) AS object,
               now() - make_interval(secs => (:total - n) * :seconds_per) AS at
        FROM generate_series(1, :count) AS n,
             unnest(ARRAY['customer.subscription.created', 'customer.subscription.updated'],
                    ARRAY['trialing', 'active']) WITH ORDINALITY AS types (t, status, step)""",
    "payment_failed": """
        SELECT 'pf' AS kind, n, 1 AS step, 'invoice.payment_failed' AS event_type,
               jsonb_build_object('id', 'in_failed_' || n, 'customer', 'cus_' || n % :customers,
                                  'currency', 'usd', 'amount_due', 700,
                                  'customer_email', 'buyer' || n % :customers || '@example.com')
                   AS object,
               now() - make_interval(secs => (:total - n) * :seconds_per) AS at
        FROM generate_series(1, :count) AS n""",
}
TEMPLATE_OF = {"invoices": "invoice", "charges": "charge", "subscriptions": "subscription",
               "payment_failed": "invoice"}

PUSHES = """
    INSERT INTO webhook_events (provider, source, event_id, event_type, payload, received_at)
    SELECT 'github', 'github', 'delivery-' || n, 'push',
           CAST(:push AS jsonb) || jsonb_build_object('after', md5(n::text)),
           now() - make_interval(secs => (:total - n) * :seconds_per)
    FROM generate_series(1, :count) AS n
"""

# What the reference handlers and the dispatcher leave, derived from the events.
EFFECTS = (
    """INSERT INTO jobs (provider, source, event_id, event_type, status, attempts, outcome,
                         run_at, created_at, finished_at)
       SELECT provider, source, event_id, event_type, 'done', 1, 'applied', received_at,
              received_at, received_at + interval '50 milliseconds'
       FROM webhook_events ORDER BY id""",
    """INSERT INTO accounts (customer_id, currency)
       SELECT DISTINCT payload #>> '{data,object,customer}', 'usd' FROM webhook_events
       WHERE event_type IN ('invoice.paid', 'charge.refunded')""",
    """INSERT INTO ledger_entries (customer_id, currency, amount, provider, event_id,
                                   entry_key, kind, reference, created_at)
       SELECT payload #>> '{data,object,customer}', 'usd',
              (payload #>> '{data,object,amount_paid}')::bigint, 'stripe', event_id,
              'invoice:' || (payload #>> '{data,object,id}'), 'invoice',
              payload #>> '{data,object,id}', received_at
       FROM webhook_events WHERE event_type = 'invoice.paid' ORDER BY id""",
    """INSERT INTO ledger_entries (customer_id, currency, amount, provider, event_id,
                                   entry_key, kind, reference, created_at)
       SELECT payload #>> '{data,object,customer}', 'usd',
              -((payload #>> '{data,object,amount_refunded}')::bigint
                - CASE WHEN event_id LIKE '%\\_2' THEN 300 ELSE 0 END),
              'stripe', event_id,
              'refund:' || (payload #>> '{data,object,id}') || ':'
                  || (payload #>> '{data,object,amount_refunded}'),
              'refund', payload #>> '{data,object,id}', received_at
       FROM webhook_events WHERE event_type = 'charge.refunded' ORDER BY id""",
    """INSERT INTO subscriptions (subscription_id, customer_id, status, last_event_created,
                                  last_event_id)
       SELECT DISTINCT ON (payload #>> '{data,object,id}') payload #>> '{data,object,id}',
              payload #>> '{data,object,customer}', payload #>> '{data,object,status}',
              (payload ->> 'created')::bigint, event_id
       FROM webhook_events WHERE event_type LIKE 'customer.subscription.%'
       ORDER BY payload #>> '{data,object,id}', id DESC""",
    """INSERT INTO outbox (idempotency_key, kind, status, to_address, subject, text_body,
                           html_body, provider, event_id, attempts, attempted_at, message_id,
                           created_at, sent_at)
       SELECT CASE WHEN event_type = 'invoice.paid'
                   THEN 'receipt:' || (payload #>> '{data,object,id}')
                   ELSE 'payment_failed:' || event_id END,
              CASE WHEN event_type = 'invoice.paid' THEN 'receipt' ELSE 'payment_failed' END,
              'sent', payload #>> '{data,object,customer_email}', 'Your receipt',
              'Thank you for your payment.', '<p>Thank you for your payment.</p>', 'stripe',
              event_id, 1, received_at, gen_random_uuid()::text, received_at,
              received_at + interval '1 second'
       FROM webhook_events WHERE event_type IN ('invoice.paid', 'invoice.payment_failed')
       ORDER BY id""",
    """UPDATE accounts a SET balance = e.total
       FROM (SELECT customer_id, currency, sum(amount) AS total FROM ledger_entries
             GROUP BY 1, 2) e
       WHERE a.customer_id = e.customer_id AND a.currency = e.currency""",
)


def counts(events: int) -> dict[str, int]:
    """How many of each kind make about `events` events."""
    found = {kind: round(events * share / (1 if kind == "payment_failed" else 2))
             for kind, share in SHARES.items()}
    used = sum(n * (1 if kind == "payment_failed" else 2) for kind, n in found.items())
    found["pushes"] = max(events - used, 0)
    return found


def fill(engine: Engine, events: int) -> dict[str, Any]:
    """The events and their effects; the seconds each step took and the table sizes."""
    made, steps = counts(events), {}
    shapes = templates()
    base = {"total": events, "seconds_per": SPREAD_DAYS * 86_400 / max(events, 1),
            "customers": CUSTOMERS, "envelope": shapes["envelope"]}
    for kind, source in SOURCES.items():
        steps[kind] = _timed(engine, sa.text(EVENTS.format(source=source)),
                             {**base, "count": made[kind], "template": shapes[TEMPLATE_OF[kind]]})
    steps["pushes"] = _timed(engine, sa.text(PUSHES),
                             {**base, "count": made["pushes"], "push": shapes["push"]})
    for number, statement in enumerate(EFFECTS):
        steps[f"effects {number + 1}"] = _timed(engine, sa.text(statement), {})
    started = time.perf_counter()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE"))
    steps["vacuum analyze"] = round(time.perf_counter() - started, 2)
    return {"made": made, "fill_seconds": steps, "rows": _rows(engine)}


def _timed(engine: Engine, statement: sa.TextClause, params: dict[str, Any]) -> float:
    started = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(statement, params)
    return round(time.perf_counter() - started, 2)


def _rows(engine: Engine) -> dict[str, int]:
    tables = ("webhook_events", "jobs", "ledger_entries", "accounts", "subscriptions", "outbox")
    with engine.connect() as conn:
        return {table: conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
                for table in tables}


def run_audit(engine: Engine, since: datetime | None) -> dict[str, Any]:
    """The audit as `webhooks audit` runs it, each check timed; it must hold."""
    started = time.perf_counter()
    found = audit.audit(engine, since=since)
    total = time.perf_counter() - started
    if found.violations:
        raise RuntimeError(f"the filled database does not hold: {found.violations[:3]}")
    return {"seconds": round(total, 2),
            "checks": {name: round(seconds, 3) for name, seconds in found.seconds.items()}}


def explain(engine: Engine) -> dict[str, str]:
    """Each check's plan, EXPLAIN (ANALYZE, BUFFERS), with every row (since NULL)."""
    import webhooks.ledger.hooks as ledger

    statements = {"event jobs": queries.AuditEventsWithoutJob,
                  "email message ids": queries.AuditSentWithoutMessageId,
                  "due jobs": queries.AuditJobsDueTooLong,
                  "account balances": ledger.AccountBalanceMismatch,
                  "invoice credits": ledger.InvoiceCreditMismatch,
                  "refund totals": ledger.RefundTotalMismatch}
    plans = {}
    params = {"since": None, "stale": audit.DEFAULT_STALE.total_seconds()}
    with engine.connect() as conn:
        for name, statement in statements.items():
            sql = sa.text(f"EXPLAIN (ANALYZE, BUFFERS) {statement.text}")
            plans[name] = "\n".join(conn.execute(sql, params).scalars())
    return plans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--explain", action="store_true", help="print each check's plan")
    parser.add_argument("--keep", action="store_true", help="keep the filled database")
    args = parser.parse_args()
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                               "commit": report.code_commit(stack.ROOT),
                               "command": f"python -m benchmarks.audit --events {args.events}",
                               "cores": os.cpu_count(),
                               "load_average_start": stack.load_average()}
    target = stack.prepare(args.admin_url, DATABASE, "redis://127.0.0.1:6379/9",
                           stack.ROOT / ".bench-logs")
    engine = target.engine()
    hooks.load()  # the reference app's checks, as `webhooks audit` loads them
    try:
        print(f"filling {args.events:,} events ...", flush=True)
        results["fill"] = fill(engine, args.events)
        print(f"  {results['fill']['rows']}", flush=True)
        results["audit"] = {"events": args.events, "all": run_audit(engine, None),
                            "since_1_day": run_audit(engine, datetime.now(UTC)
                                                     - timedelta(days=1))}
        if args.explain:
            for name, plan in explain(engine).items():
                print(f"\n-- {name}\n{plan}")
    finally:
        engine.dispose()
        if not args.keep:
            stack.drop(args.admin_url, DATABASE)
    results["load_average_end"] = stack.load_average()
    print_summary(results["audit"])
    for path in report.save_to_history(results, report.RESULTS, "audit"):
        print(f"saved {path}")
    report.write_readme()


def print_summary(result: dict[str, Any]) -> None:
    print(f"\naudit of {result['events']:,} events (SPEC: within 60 s at 200,000):")
    for label in ("all", "since_1_day"):
        run = result[label]
        checks = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in run["checks"].items())
        print(f"  {label.replace('_', ' '):<12} {run['seconds']:7.2f} s  ({checks})")


if __name__ == "__main__":
    main()
