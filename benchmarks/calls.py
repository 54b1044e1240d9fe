"""`python -m benchmarks --only calls`: what a call to another API (`ctx.queue_call`,
shared/calls.py) costs the worker, and how fast the call dispatch (worker/calls.py) makes
calls, each beside an email through the outbox, in the same run.

On a database of its own (`<the benchmark's>_calls`, created next to the benchmark's,
migrated, dropped after), with this module running as the only app (`hooks.load`, as the
kit loads its apps): its handlers, for Stripe event types of its own, each record nothing
else and queue one refund of the event's disputed charge (`POST /v1/refunds`, keyed by the
charge, as examples/disputes does), or one email (keyed by the dispute), or nothing (the
baseline: the same job's claim, payload, handler call and done mark).

1. The worker's CPU per job: N jobs of one kind drained by `worker.jobs.process_batch` in
   a loop in this process (batches of jobs.BATCH_SIZE), CPU of this process
   (time.process_time) per job in µs, and jobs/s; the kinds alternated over the rounds,
   the median of each. Ratio: a call's job over an email's, and their costs above the
   baseline's.
2. The dispatch: M calls (the rows the call handler queued, from M jobs drained first,
   not timed) made by `worker.calls.dispatch_due` in a loop, in one thread, then two, until
   a round claims none, against the fake Stripe API; and M emails (queued the same way)
   sent by `worker.outbox.dispatch_due` against the fake Postmark, in one thread, then two
   (in production one outbox loop runs per worker process: two threads stand for two
   processes' loops). The calls go through the process's one Stripe request budget
   (shared/providers/stripe_budget.py, a token bucket every Stripe client of a process
   draws from): made as the code makes them, its rate bounds them, so those runs make
   BUDGETED_CALLS; made again with the budget lifted (its bucket replaced by one that never
   waits, for that run only), M calls: the dispatch's own rate. Per kind and thread count:
   sent/s (wall), this process's CPU per item in µs, the median over the rounds; ratios
   calls/s ÷ emails/s, CPU per call ÷ per email, and two threads ÷ one.

The fakes are the tests' (tests/fakes/provider_apis.py FakeProviderApis with its
idempotency keys, tests/fakes/postmark_server.py FakePostmark; benchmarks/reconcile.py and
benchmarks/tracing.py import from tests/fakes too), each in a child process of its own
(`serve`), so that their requests' handling is neither counted in this process's CPU nor
holding its GIL. The fake Stripe answers HTTP/1.0 (a new loopback connection per call),
the fake Postmark keeps connections alive, as Postmark does; neither has TLS. A call is
one request; up to wakeups.EMAILS_PER_MESSAGE emails are one (Postmark's batch). The
database's timeline is recorded first (what the clock's first sweep does), so the outbox
sends without searching Postmark first, as it does outside a failover's window. The
`webhooks` logger writes INFO as JSON lines to calls.log in the run's log folder (the
worker's production format; the dispatch logs a line per call, the outbox one per
dispatch), not to the console.

Everything runs in this process: it measures this checkout's code, whatever `--code` names.
"""

from __future__ import annotations

import importlib
import json
import logging
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchmarks import stack
from webhooks import migrate
from webhooks.shared import db, failover, hooks, wakeups
from webhooks.shared.handlers import JobContext, handler
from webhooks.shared.logs import JsonFormatter
from webhooks.shared.settings import Settings
from webhooks.worker import calls as call_dispatch
from webhooks.worker import jobs, outbox

APP = __name__  # this module is the app its handlers belong to
JOBS = 2_000
CALLS = 1_000
BUDGETED_CALLS = 250  # within the Stripe budget: its rate bounds them (25/s: 10 s a run)
ROUNDS = 3
THREADS = (1, 2)
SMOKE = {"jobs": 100, "calls": 40, "budgeted": 20, "rounds": 1}
WARM_UP = 20  # jobs of each kind, and calls and emails, run once before any measure
KINDS = ("nothing", "email", "call")
EVENT_TYPES = {kind: f"bench.calls.{kind}" for kind in KINDS}
TABLES = ("calls", "outbox", "jobs", "webhook_events", "webhook_dedup", "event_search",
          "notifications", "notification_deliveries", "notification_windows",
          "notification_health")
LOG = logging.getLogger("webhooks")


def _dispute(ctx: JobContext) -> dict[str, Any]:
    dispute: dict[str, Any] = ctx.payload["data"]["object"]
    return dispute


@handler("stripe", EVENT_TYPES["nothing"])
def nothing(ctx: JobContext) -> str:
    _dispute(ctx)
    return "nothing queued"


@handler("stripe", EVENT_TYPES["email"])
def email(ctx: JobContext) -> str:
    dispute = _dispute(ctx)
    amount = f"{dispute['amount'] / 100:.2f} {dispute['currency'].upper()}"
    ctx.queue_email(
        key=f"dispute:{dispute['id']}", kind="dispute", to=dispute["customer_email"],
        subject=f"We are refunding {amount}",
        text_body=f"Your payment {dispute['charge']} is disputed: we are refunding {amount}.",
        html_body=f"<p>Your payment <code>{dispute['charge']}</code> is disputed: we are "
                  f"refunding <strong>{amount}</strong>.</p>")
    return "email queued"


@handler("stripe", EVENT_TYPES["call"])
def call(ctx: JobContext) -> str:
    dispute = _dispute(ctx)
    ctx.queue_call(key=f"refund:{dispute['charge']}", target="stripe", method="POST",
                   path="/v1/refunds",
                   params={"charge": dispute["charge"], "amount": dispute["amount"],
                           "reason": "requested_by_customer",
                           "metadata[dispute]": dispute["id"]})
    return "refund queued"


# --- the fakes, each in a child process -----------------------------------------------


def serve(kind: str) -> None:
    """A fake (`stripe` or `postmark`) in this process until its stdin closes: its URL on
    stdout's first line, then what it received, as one JSON line."""
    if kind == "stripe":
        from tests.fakes.provider_apis import FakeProviderApis

        with FakeProviderApis() as stripe:
            print(stripe.url, flush=True)
            sys.stdin.read()
            with stripe.state.lock:
                posts, created = list(stripe.state.stripe_posts), dict(stripe.state.created)
        summary = {"requests": len(posts),
                   "replayed": sum(1 for *_, replayed in posts if replayed),
                   "keys": len(created), "objects": sum(map(len, created.values())),
                   "keys_made_twice": sum(1 for ids in created.values() if len(ids) > 1)}
    else:
        from tests.fakes.postmark_server import FakePostmark

        with FakePostmark() as postmark:
            print(postmark.url, flush=True)
            sys.stdin.read()
            seen = postmark.snapshot()
        summary = {"requests": sum(seen["requests"].values()), "messages": seen["total"],
                   "keys": len(seen["by_key"]),
                   "keys_sent_twice": sum(1 for n in seen["by_key"].values() if n > 1)}
    print(json.dumps(summary), flush=True)


@dataclass
class Fake:
    url: str
    summary: dict[str, Any] = field(default_factory=dict)


@contextmanager
def _fake(kind: str, logs: Path) -> Iterator[Fake]:
    with (logs / f"fake-{kind}.log").open("ab") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", f"from benchmarks.calls import serve; serve({kind!r})"],
            cwd=stack.ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            text=True)
        stdin, stdout = _pipes(child)
        try:
            url = stdout.readline().strip()
            if not url.startswith("http"):
                raise RuntimeError(f"the fake {kind} did not start (see {log.name})")
            fake = Fake(url)
            yield fake
            stdin.close()
            fake.summary = json.loads(stdout.readline() or "{}")
            child.wait(30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)


def _pipes(child: subprocess.Popen[str]) -> tuple[IO[str], IO[str]]:
    assert child.stdin is not None and child.stdout is not None
    return child.stdin, child.stdout


# --- the database ---------------------------------------------------------------------


@contextmanager
def _database(target: stack.Target) -> Iterator[str]:
    """`<the benchmark's database>_calls`, created next to it and migrated (the core's
    history: this app has none), dropped at the end."""
    url = sa.make_url(db.sqlalchemy_url(target.database_url))
    name = f"{url.database}_calls"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        created = url.set(database=name)
        engine = sa.create_engine(created, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                migrate.upgrade(conn, migrate.app_modules([APP]))
                conn.commit()
            with db.transaction(engine) as conn:
                failover.record_timeline(conn)  # the clock's first sweep: not a failover
        finally:
            engine.dispose()
        try:
            yield created.render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def _reset(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))


def _seed(engine: Engine, kind: str, count: int, tag: str) -> None:
    """`count` pending jobs of `kind` and their events: one dispute each, its own charge
    (`ch_<tag>_<n>`: a refund's idempotency key is new to the fake in every run)."""
    with engine.begin() as conn:
        conn.execute(sa.text("""
            INSERT INTO webhook_events (provider, source, event_id, event_type, payload)
            SELECT 'stripe', 'stripe', :tag || '_' || n, CAST(:type AS text), jsonb_build_object(
                'id', :tag || '_' || n, 'object', 'event', 'type', CAST(:type AS text),
                'created', extract(epoch FROM now())::bigint, 'livemode', false,
                'data', jsonb_build_object('object', jsonb_build_object(
                    'id', 'dp_' || :tag || '_' || n, 'object', 'dispute',
                    'charge', 'ch_' || :tag || '_' || n, 'amount', 700 + n % 300,
                    'currency', 'usd', 'reason', 'general', 'status', 'warning_needs_response',
                    'customer_email', 'buyer' || n || '@example.com')))
            FROM generate_series(1, :count) AS n
        """), {"tag": tag, "type": EVENT_TYPES[kind], "count": count})
        conn.execute(sa.text("""
            INSERT INTO jobs (provider, source, event_id, event_type, created_at)
            SELECT provider, source, event_id, event_type, received_at FROM webhook_events
            ORDER BY id
        """))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE jobs, webhook_events"))


def _count(engine: Engine, statement: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(statement)).scalar_one())


# --- 1. the worker's CPU per job ------------------------------------------------------


def _drain(engine: Engine, settings: Settings) -> tuple[float, float, int]:
    """Every pending job through the worker's batches: (CPU s, wall s, jobs done)."""
    jobs.PACE.seconds_per_job = 1e-9  # full claims every run, whatever the last one learned
    done = 0
    cpu, wall = time.process_time(), time.perf_counter()
    while (batch := jobs.process_batch(engine, settings, limit=jobs.BATCH_SIZE)).claimed:
        done += batch.done
    return time.process_time() - cpu, time.perf_counter() - wall, done


def _worker_run(engine: Engine, settings: Settings, kind: str, count: int,
                tag: str) -> dict[str, Any]:
    _reset(engine)
    _seed(engine, kind, count, tag)
    cpu, wall, done = _drain(engine, settings)
    if done != count:
        raise RuntimeError(f"{kind}: {done} of {count} jobs done")
    queued = {"email": _count(engine, "SELECT count(*) FROM outbox"),
              "call": _count(engine, "SELECT count(*) FROM calls")}
    expected = {"email": count if kind == "email" else 0, "call": count if kind == "call" else 0}
    if queued != expected:
        raise RuntimeError(f"{kind}: queued {queued}, expected {expected}")
    return {"cpu_us_per_job": round(cpu / count * 1e6, 1),
            "jobs_per_s": round(count / wall, 1)}


def _worker(engine: Engine, settings: Settings, count: int, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for round_no in range(rounds):
        order = KINDS if round_no % 2 == 0 else tuple(reversed(KINDS))
        for kind in order:
            runs[kind].append(_worker_run(engine, settings, kind, count,
                                          f"w{round_no}{kind[0]}"))
    kinds = {kind: {"cpu_us_per_job": _median(found, "cpu_us_per_job"),
                    "jobs_per_s": _median(found, "jobs_per_s"), "runs": found}
             for kind, found in runs.items()}
    cpu = {kind: _median(found, "cpu_us_per_job") for kind, found in runs.items()}
    above = cpu["email"] - cpu["nothing"]
    return {"jobs": count, "rounds": rounds, "kinds": kinds,
            "call_over_email": round(cpu["call"] / cpu["email"], 3),
            "call_above_nothing_us": round(cpu["call"] - cpu["nothing"], 1),
            "email_above_nothing_us": round(above, 1),
            "call_over_email_above_nothing": round((cpu["call"] - cpu["nothing"]) / above, 3)
            if above > 0 else None}


# --- 2. the dispatch ------------------------------------------------------------------


@dataclass(frozen=True)
class Dispatch:
    kind: str  # "calls", "calls_unbudgeted" or "emails"
    label: str
    job_kind: str  # the handler that queues them
    table: str
    one_round: Callable[[Engine, Settings], tuple[int, int]]  # (claimed, sent)
    budget_lifted: bool = False


def _call_round(engine: Engine, settings: Settings) -> tuple[int, int]:
    result = call_dispatch.dispatch_due(engine, settings)
    return result.claimed, result.sent


def _email_round(engine: Engine, settings: Settings) -> tuple[int, int]:
    result = outbox.dispatch_due(engine, settings)
    return result.claimed, result.sent


CALLS_AS_MADE = Dispatch("calls", "calls", "call", "calls", _call_round)
CALLS_UNBUDGETED = Dispatch("calls_unbudgeted", "calls, budget lifted", "call", "calls",
                            _call_round, budget_lifted=True)
EMAILS = Dispatch("emails", "emails", "email", "outbox", _email_round)


def _stripe_budget() -> Any:
    """The process's Stripe request budget (shared/providers/stripe_budget.py), which the
    call dispatch's Stripe client draws from; None where the code has none."""
    try:
        module = importlib.import_module("webhooks.shared.providers.stripe_budget")
    except ImportError:
        return None
    return module if hasattr(module, "BUCKET") else None


class _NoBudget:
    def take(self) -> None:
        return None


@contextmanager
def _budget_lifted() -> Iterator[None]:
    """Every Stripe request of this process without waiting for the budget's token (its
    BUCKET replaced while the block runs): the dispatch's own rate."""
    module = _stripe_budget()
    saved = module.BUCKET
    module.BUCKET = _NoBudget()
    try:
        yield
    finally:
        module.BUCKET = saved


def _dispatch_run(engine: Engine, settings: Settings, dispatch: Dispatch, count: int,
                  threads: int, tag: str) -> dict[str, Any]:
    _worker_run(engine, settings, dispatch.job_kind, count, tag)  # the rows to send
    sent = [0] * threads
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)

    def loop(index: int) -> None:
        try:
            start.wait(30)
            while True:
                claimed, made = dispatch.one_round(engine, settings)
                sent[index] += made
                if not claimed:
                    return
        except BaseException as error:
            errors.append(error)

    workers = [threading.Thread(target=loop, args=(index,), name=f"bench-dispatch-{index}")
               for index in range(threads)]
    with _budget_lifted() if dispatch.budget_lifted else nullcontext():
        for worker in workers:
            worker.start()
        cpu, wall = time.process_time(), time.perf_counter()
        start.wait(30)
        for worker in workers:
            worker.join()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if errors:
        raise errors[0]
    marked = _count(engine, f"SELECT count(*) FROM {dispatch.table} WHERE status = 'sent'")
    if sum(sent) != count or marked != count:
        raise RuntimeError(f"{dispatch.label}, {threads} thread(s): {sum(sent)} sent, "
                           f"{marked} marked sent, of {count}")
    return {"items": count, "per_s": round(count / wall, 1),
            "cpu_us_per_item": round(cpu / count * 1e6, 1), "seconds": round(wall, 3),
            "per_thread": sent}


def _dispatches(engine: Engine, settings: Settings, count: int, budgeted: int,
                rounds: int) -> dict[str, Any]:
    """Each dispatch's rows, by kind then threads; `budgeted`: how many calls the runs
    within the Stripe budget make (its rate bounds them: fewer suffice)."""
    budget = _stripe_budget()
    dispatches = (CALLS_AS_MADE, CALLS_UNBUDGETED, EMAILS) if budget else (CALLS_AS_MADE,
                                                                           EMAILS)
    items = {"calls": min(count, budgeted) if budget else count, "calls_unbudgeted": count,
             "emails": count}
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for round_no in range(rounds):
        order = dispatches if round_no % 2 == 0 else tuple(reversed(dispatches))
        for threads in THREADS:
            for dispatch in order:
                runs.setdefault((dispatch.kind, threads), []).append(_dispatch_run(
                    engine, settings, dispatch, items[dispatch.kind], threads,
                    f"d{round_no}{dispatch.kind[:7]}{threads}"))
    labels = {dispatch.kind: dispatch.label for dispatch in dispatches}
    rows = [{"kind": kind, "label": labels[kind], "threads": threads,
             "items": found[0]["items"], "per_s": _median(found, "per_s"),
             "cpu_us_per_item": _median(found, "cpu_us_per_item"), "runs": found}
            for (kind, threads), found in runs.items()]
    rows.sort(key=lambda row: (list(labels).index(row["kind"]), row["threads"]))
    rate = {(row["kind"], row["threads"]): row["per_s"] for row in rows}
    cpu = {(row["kind"], row["threads"]): row["cpu_us_per_item"] for row in rows}
    ratios = {}
    for kind in labels:
        if kind != "emails":
            for threads in THREADS:
                ratios[f"{kind}_over_emails_per_s_{threads}"] = round(
                    rate[kind, threads] / rate["emails", threads], 3)
                ratios[f"{kind}_over_emails_cpu_{threads}"] = round(
                    cpu[kind, threads] / cpu["emails", threads], 3)
        ratios[f"{kind}_2_over_1"] = round(rate[kind, 2] / rate[kind, 1], 3)
    return {"items": count, "budgeted_items": items["calls"], "rounds": rounds,
            "threads": list(THREADS),
            "stripe_budget_per_s": getattr(budget, "REQUESTS_PER_SECOND", None),
            "emails_per_request": wakeups.EMAILS_PER_MESSAGE,
            "calls_per_claim": call_dispatch.BATCH, "rows": rows, "ratios": ratios,
            "sent": {kind: sum(run["items"] for (k, _), found in runs.items() if k == kind
                               for run in found) for kind in labels}}


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(run[key] for run in runs), 1)


# --- the part -------------------------------------------------------------------------


@contextmanager
def _logging_to(path: Path) -> Iterator[None]:
    """The `webhooks` logger at INFO, as JSON lines to `path` only (then as it was)."""
    handler_ = logging.FileHandler(path)
    handler_.setFormatter(JsonFormatter())
    level, propagate = LOG.level, LOG.propagate
    LOG.addHandler(handler_)
    LOG.setLevel(logging.INFO)
    LOG.propagate = False
    try:
        yield
    finally:
        LOG.removeHandler(handler_)
        handler_.close()
        LOG.setLevel(level)
        LOG.propagate = propagate


def run(target: stack.Target, jobs: int = JOBS, calls: int = CALLS,
        budgeted: int = BUDGETED_CALLS, rounds: int = ROUNDS) -> dict[str, Any]:
    from tests.fakes.postmark_server import DEFAULT_TOKEN
    from tests.fakes.provider_apis import STRIPE_KEY

    previous = hooks.running()
    load = stack.load_average()
    started = time.monotonic()
    with _fake("stripe", target.logs) as stripe, _fake("postmark", target.logs) as postmark, \
            _database(target) as url, _logging_to(target.logs / "calls.log"):
        settings = Settings.from_env({
            "DATABASE_URL": url, "WEBHOOK_HANDLERS": APP,
            # the default Stripe source (its secret makes it one), whose key the calls use
            "STRIPE_WEBHOOK_SECRET": stack.STRIPE_SECRET, "STRIPE_API_KEY": STRIPE_KEY,
            "STRIPE_API_BASE": stripe.url, "POSTMARK_SERVER_TOKEN": DEFAULT_TOKEN,
            "POSTMARK_API_URL": postmark.url, "LOG_FORMAT": "json"})
        hooks.load(settings.handler_modules)
        engine = db.create_engine(settings, pool_size=4)
        try:
            for kind in KINDS:
                _worker_run(engine, settings, kind, WARM_UP, f"warm{kind[0]}")
            warm_calls = CALLS_UNBUDGETED if _stripe_budget() else CALLS_AS_MADE
            for dispatch in (warm_calls, EMAILS):
                _dispatch_run(engine, settings, dispatch, WARM_UP, 1, f"warm{dispatch.kind}")
            worker = _worker(engine, settings, jobs, rounds)
            dispatched = _dispatches(engine, settings, calls, budgeted, rounds)
        finally:
            engine.dispose()
            hooks.load(previous)
    sent = dispatched["sent"]
    made_calls = WARM_UP + sent["calls"] + sent.get("calls_unbudgeted", 0)
    made_emails = WARM_UP + sent["emails"]
    return {"jobs": jobs, "calls": calls, "rounds": rounds, "load_average": load,
            "seconds": round(time.monotonic() - started, 1),
            "worker": worker, "dispatch": dispatched,
            "fakes": {"stripe": stripe.summary, "postmark": postmark.summary,
                      "calls_made": made_calls, "emails_sent": made_emails,
                      "each_key_once": stripe.summary.get("objects") == made_calls
                      == stripe.summary.get("keys") and not stripe.summary.get("replayed")
                      and postmark.summary.get("messages") == made_emails
                      == postmark.summary.get("keys")}}


def print_summary(result: dict[str, Any]) -> None:
    worker, dispatched = result["worker"], result["dispatch"]
    print(f"  worker.jobs.process_batch, {worker['jobs']:,} jobs a kind, median of "
          f"{worker['rounds']} rounds (this process's CPU):")
    for kind, figures in worker["kinds"].items():
        print(f"    handler queues {'one ' + kind if kind != 'nothing' else 'nothing':<10} "
              f"{figures['cpu_us_per_job']:8.1f} µs CPU/job  "
              f"{figures['jobs_per_s']:8,.0f} jobs/s")
    print(f"    call ÷ email {worker['call_over_email']}; above nothing: call "
          f"{worker['call_above_nothing_us']} µs, email {worker['email_above_nothing_us']} µs"
          f" (÷ {worker['call_over_email_above_nothing']})")
    budget = dispatched["stripe_budget_per_s"]
    print(f"  dispatch, median of {dispatched['rounds']} rounds (calls: one request each"
          + (f", within the process's Stripe budget of {budget:g}/s unless lifted" if budget
             else "") + f"; emails: up to {dispatched['emails_per_request']} a request):")
    for row in dispatched["rows"]:
        print(f"    {row['label']:<21} {row['items']:>6,} by {row['threads']} thread(s) "
              f"{row['per_s']:9,.1f} /s  {row['cpu_us_per_item']:8.1f} µs CPU each")
    ratios = dispatched["ratios"]
    for kind in ("calls", "calls_unbudgeted"):
        if f"{kind}_2_over_1" in ratios:
            print(f"    {kind.replace('_', ' ')}: per s ÷ emails' "
                  f"{ratios[f'{kind}_over_emails_per_s_1']} (1 thread), "
                  f"{ratios[f'{kind}_over_emails_per_s_2']} (2); CPU per item ÷ emails' "
                  f"{ratios[f'{kind}_over_emails_cpu_1']}, {ratios[f'{kind}_over_emails_cpu_2']}"
                  f"; two threads ÷ one {ratios[f'{kind}_2_over_1']}")
    print(f"    emails: two threads ÷ one {ratios['emails_2_over_1']}")
    fakes = result["fakes"]
    print(f"  fakes: Stripe {fakes['stripe']}; Postmark {fakes['postmark']}; each key once: "
          f"{fakes['each_key_once']}")
