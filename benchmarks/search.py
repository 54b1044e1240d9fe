"""`--only search`: what the event search costs on a large table, and what its index costs
the ingest.

Loads Stripe-shaped events of 1-2 KB (search_events.sql, through INSERT ... SELECT
generate_series) with a job each (2% failed, 3% pending), then times the first page (50)
of three searches through `shared.events.list_events`:

- rare:   a word only one event holds (a charge id, as an operator pastes it);
- id:     an event id;
- common: a word most events hold (`usd`, `visa`, ...) with `--status failed`.

Each under three index options: none (ix_webhook_events_search dropped), the full-text GIN
index of migration 0008 (ix_webhook_events_search_bounded), and a pg_trgm GIN trigram index on the
event id and payload text, searched with ILIKE '%text%' (pg_trgm is not in the embedded
pgserver). The ILIKE search is also timed without its index. For each option it records
the index's size and build time, and the ingest's insert rate (pgbench running
search_ingest.sql, the ingest's EventJobInsert with payloads of the same shape) with that
index alone on the table.

The slow options (sequential scans) stop a query kind after `budget_seconds`, once they
have at least `min_searches` timings: their counts are in the results. The benchmark's
database is left without a search index (it is dropped unless --keep-database).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from benchmarks import pgbench, stack
from benchmarks.load import percentile
from shared import events
from shared.events import EventFilter
from shared.models import EVENT_SEARCH_DOCUMENT, JobStatus, webhook_events

HERE = Path(__file__).resolve().parent
FTS_INDEX = "ix_webhook_events_search_bounded"
TRGM_INDEX = "ix_bench_webhook_events_trgm"
TRGM_DOCUMENT = "(event_id || ' ' || payload::text)"
# The same, qualified for the listing's join (jobs has an event_id too).
TRGM_QUERY_DOCUMENT = "(webhook_events.event_id || ' ' || webhook_events.payload::text)"
COMMON_WORDS = ("usd", "visa", "paid", "succeeded", "eur")
PAGE = 50
LOAD_CHUNK = 100_000
LOAD_CONNECTIONS = 2


@dataclass(frozen=True)
class Plan:
    events: int = 1_000_000
    searches: int = 200  # per query kind and option
    min_searches: int = 3
    budget_seconds: float = 20  # per query kind and option
    ingest_seconds: float = 5  # per pgbench run
    ingest_runs: int = 3  # the median run counts
    ingest_clients: int = 16  # as the ingest scenario's pgbench
    warmup: int = 1


SMOKE = Plan(events=20_000, searches=20, min_searches=2, budget_seconds=2, ingest_seconds=2,
             ingest_runs=1, warmup=0)

Search = Callable[[Connection, str, JobStatus | None], int]  # -> rows on the first page


def run(target: stack.Target, plan: Plan) -> dict[str, Any]:
    engine = target.engine()
    try:
        return _run(engine, target, plan)
    finally:
        engine.dispose()


def _run(engine: Engine, target: stack.Target, plan: Plan) -> dict[str, Any]:
    stack.reset(target)
    _autocommit(engine, f"DROP INDEX IF EXISTS {FTS_INDEX}", f"DROP INDEX IF EXISTS {TRGM_INDEX}")
    loaded = load_events(engine, plan.events)
    terms = _terms(engine, plan)
    result: dict[str, Any] = {"plan": asdict(plan), "load": loaded, "options": {}}
    options = result["options"]
    print(f"  loaded {plan.events:,} events in {loaded['seconds']} s "
          f"(table {loaded['table_mb']} MB, average payload {loaded['payload_bytes']} B)",
          flush=True)

    options["none"] = _option(engine, target, plan, terms, index=None,
                              searches={"fts": _fts, "ilike": _ilike})
    options["fts"] = _option(engine, target, plan, terms, index=(
        FTS_INDEX, f"CREATE INDEX {FTS_INDEX} ON webhook_events USING gin "
                   f"({EVENT_SEARCH_DOCUMENT})"), searches={"fts": _fts})
    _autocommit(engine, f"DROP INDEX {FTS_INDEX}")
    if _trigram_available(engine):
        options["trigram"] = _option(engine, target, plan, terms, index=(
            TRGM_INDEX, f"CREATE INDEX {TRGM_INDEX} ON webhook_events USING gin "
                        f"({TRGM_DOCUMENT} gin_trgm_ops)"), searches={"ilike": _ilike})
        _autocommit(engine, f"DROP INDEX {TRGM_INDEX}")
        # Without a search index again, last: the machine's drift over the run shows in
        # the two measurements of the same thing.
        options["none"]["ingest_again"] = _ingest(engine, target, plan)
    else:
        options["trigram"] = None
        print("  pg_trgm is not available on this server: no trigram option", flush=True)
    result["ratios"] = _ratios(options)
    return result


# --- loading ----------------------------------------------------------------------------


def load_events(engine: Engine, count: int, *, unfinished: bool = True) -> dict[str, Any]:
    """`count` events received over the last 30 days (the newest last) and their jobs: 2%
    failed and 3% pending, the rest done; all done when not `unfinished` (a history that
    gives a worker nothing to do: benchmarks/growth.py)."""
    started = time.monotonic()
    with engine.begin() as conn:
        conn.execute(sa.text((HERE / "search_events.sql").read_text()))
    spacing = 30 * 86400 / count

    def chunk(first: int) -> None:
        last = min(count, first + LOAD_CHUNK - 1)
        with engine.begin() as conn:
            conn.execute(sa.text("""
                INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                            received_at)
                SELECT 'stripe', 'stripe', e->>'id', e->>'type', e,
                       now() - make_interval(secs => (:count - n) * :spacing)
                FROM generate_series(CAST(:first AS bigint), :last) AS n,
                     bench_stripe_event(n) AS e
            """), {"count": count, "spacing": spacing, "first": first, "last": last})
        if count > LOAD_CHUNK:
            print(f"  loaded events {first:,} to {last:,}", flush=True)

    with ThreadPoolExecutor(LOAD_CONNECTIONS) as pool:  # INSERT ... SELECT runs on one core
        list(pool.map(chunk, range(1, count + 1, LOAD_CHUNK)))
    with engine.begin() as conn:
        conn.execute(sa.text("""
            INSERT INTO jobs (provider, source, event_id, event_type, status, attempts,
                              last_error, outcome, run_at, created_at, finished_at)
            SELECT provider, source, event_id, event_type, s.status,
                   CASE s.status WHEN 'failed' THEN 8 WHEN 'done' THEN 1 ELSE 0 END,
                   CASE s.status WHEN 'failed' THEN 'KeyError: ''customer_email''' END,
                   CASE s.status WHEN 'done' THEN 'applied' END,
                   received_at, received_at,
                   CASE s.status WHEN 'pending' THEN NULL
                        ELSE received_at + interval '40 milliseconds' END
            FROM webhook_events,
                 LATERAL (SELECT CASE WHEN NOT :unfinished THEN 'done'
                                      WHEN id % 50 = 7 THEN 'failed'
                                      WHEN id % 100 < 3 THEN 'pending'
                                      ELSE 'done' END AS status) AS s
        """), {"unfinished": unfinished})
    _autocommit(engine, "VACUUM ANALYZE webhook_events", "VACUUM ANALYZE jobs")
    with engine.connect() as conn:
        sizes = conn.execute(sa.text("""
            SELECT pg_total_relation_size('webhook_events') AS total,
                   (SELECT avg(pg_column_size(payload)) FROM
                        (SELECT payload FROM webhook_events LIMIT 10000) AS s) AS stored,
                   (SELECT avg(length(payload::text)) FROM
                        (SELECT payload FROM webhook_events LIMIT 10000) AS s) AS text
        """)).one()
    return {"events": count, "seconds": round(time.monotonic() - started, 1),
            "table_mb": _mb(sizes.total), "payload_bytes": round(float(sizes.text)),
            "payload_stored_bytes": round(float(sizes.stored))}


@dataclass(frozen=True)
class Terms:
    rare: list[str]
    ids: list[str]
    common: list[str]


def _terms(engine: Engine, plan: Plan) -> Terms:
    """Random events' charge ids (or a subscription's latest invoice) and event ids."""
    wanted = plan.searches + plan.warmup
    ids = random.Random(14).sample(range(1, plan.events + 1), min(plan.events, 2 * wanted))
    with engine.connect() as conn:
        rows = conn.execute(sa.text("""
            SELECT event_id, coalesce(payload #>> '{data,object,charge}',
                                      CASE WHEN payload #>> '{data,object,object}' = 'charge'
                                           THEN payload #>> '{data,object,id}' END,
                                      payload #>> '{data,object,latest_invoice}') AS rare
            FROM webhook_events WHERE id = ANY(:ids)
        """), {"ids": ids}).all()
    rows = list(rows)
    random.Random(15).shuffle(rows)
    common = [COMMON_WORDS[i % len(COMMON_WORDS)] for i in range(wanted)]
    return Terms([r.rare for r in rows[:wanted]], [r.event_id for r in rows[-wanted:]], common)


# --- one index option -------------------------------------------------------------------


def _option(engine: Engine, target: stack.Target, plan: Plan, terms: Terms,
            index: tuple[str, str] | None, searches: dict[str, Search]) -> dict[str, Any]:
    name = index[0] if index else "none"
    print(f"  -- {name}", flush=True)
    built: dict[str, Any] = {"index": None, "build_seconds": None, "index_mb": None}
    if index is not None:
        started = time.monotonic()
        _autocommit(engine, "SET maintenance_work_mem = '1GB'", index[1],
                    "ANALYZE webhook_events")
        built = {"index": index[0], "build_seconds": round(time.monotonic() - started, 1),
                 "index_mb": _index_mb(engine, index[0])}
        print(f"  built {index[0]} in {built['build_seconds']} s: {built['index_mb']} MB",
              flush=True)
    timings = {}
    for method, search in searches.items():
        for kind, words, status in (("rare", terms.rare, None), ("id", terms.ids, None),
                                    ("common", terms.common, JobStatus.FAILED)):
            cell = _time(engine, search, words, status, plan)
            timings[f"{method}_{kind}"] = cell
            print(f"  {method:5s} {kind:6s}  {cell['searches']:4d} searches  "
                  f"p50 {cell['p50_ms']:9.2f} ms  p99 {cell['p99_ms']:9.2f} ms  "
                  f"rows {cell['rows']}  plan {cell['plan']}", flush=True)
    ingest = _ingest(engine, target, plan)
    if ingest:
        print(f"  ingest (pgbench search_ingest.sql, {ingest['clients']} clients): "
              f"{ingest['tps']:.0f} inserts/s  p50 {ingest['p50_ms']} ms  "
              f"p99 {ingest['p99_ms']} ms", flush=True)
    return {**built, "searches": timings, "ingest": ingest}


def _time(engine: Engine, search: Search, words: list[str], status: JobStatus | None,
          plan: Plan) -> dict[str, Any]:
    latencies: list[float] = []
    rows: set[int] = set()
    with engine.connect() as conn:
        for word in words[:plan.warmup]:
            search(conn, word, status)
        started = time.monotonic()
        for word in words[plan.warmup:plan.warmup + plan.searches]:
            with captured(conn) as sent:
                before = time.perf_counter()
                rows.add(search(conn, word, status))
                latencies.append((time.perf_counter() - before) * 1000)
            conn.rollback()
            if len(latencies) == 1:
                scanned = _plan_summary(conn, *sent[-1])
            if (len(latencies) >= plan.min_searches
                    and time.monotonic() - started > plan.budget_seconds):
                break
    return {"searches": len(latencies), "p50_ms": round(percentile(latencies, 50), 3),
            "p99_ms": round(percentile(latencies, 99), 3),
            "mean_ms": round(sum(latencies) / len(latencies), 3),
            "rows": sorted(rows), "plan": scanned}


def _fts(conn: Connection, word: str, status: JobStatus | None) -> int:
    """The product's search: shared.events.list_events."""
    return len(events.list_events(conn, EventFilter(search=word, status=status),
                                  limit=PAGE).events)


def _ilike_query(word: str, status: JobStatus | None) -> sa.Select[Any]:
    """list_events' listing and filters (its private helpers, so that only the search
    predicate differs), searching ILIKE '%word%' over TRGM_DOCUMENT."""
    escaped = re.sub(r"([\\%_])", r"\\\1", word)
    document: sa.ColumnElement[str] = sa.literal_column(TRGM_QUERY_DOCUMENT)
    query = events._where(events._listing(), EventFilter(status=status))
    e = webhook_events.c
    return (query.where(document.ilike(f"%{escaped}%", escape="\\"))
            .order_by(e.received_at.desc(), e.id.desc()).limit(PAGE + 1))


def _ilike(conn: Connection, word: str, status: JobStatus | None) -> int:
    return min(PAGE, len(conn.execute(_ilike_query(word, status)).all()))


def _plan_summary(conn: Connection, statement: str, parameters: Any) -> str:
    """The indexes the plan of a statement a search sent reads (or Seq Scan), outer first."""
    plan: Any = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters).scalar()
    conn.rollback()
    return " > ".join(dict.fromkeys(scans(plan[0]["Plan"]))) or "?"


@contextmanager
def captured(conn: Connection) -> Iterator[list[tuple[str, Any]]]:
    """The (statement, parameters) pairs sent on `conn` inside the block."""
    statements: list[tuple[str, Any]] = []

    def listen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        statements.append((statement, parameters))

    sa.event.listen(conn, "before_cursor_execute", listen)
    try:
        yield statements
    finally:
        sa.event.remove(conn, "before_cursor_execute", listen)


def scans(node: dict[str, Any]) -> Iterator[str]:
    """How an EXPLAIN (FORMAT JSON) plan reads its tables, outer first: each index it
    reads, or "Seq Scan on TABLE"."""
    if "Index Name" in node:
        yield node["Index Name"]
    elif node.get("Node Type") == "Seq Scan":
        yield f"Seq Scan on {node.get('Relation Name')}"
    for child in node.get("Plans", []):
        yield from scans(child)


def _ingest(engine: Engine, target: stack.Target, plan: Plan) -> dict[str, Any] | None:
    """Inserts per second of the ingest's statement with this option's indexes; the rows it
    adds are deleted afterwards."""
    runs = []
    for _ in range(plan.ingest_runs):
        with engine.connect() as conn:
            last_id = conn.execute(sa.text("SELECT max(id) FROM webhook_events")).scalar_one()
        _autocommit(engine, "CHECKPOINT")
        result = pgbench.run(target.database_url, HERE / "search_ingest.sql",
                             plan.ingest_clients, seconds=plan.ingest_seconds)
        with engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM webhook_events WHERE id > :id"), {"id": last_id})
        _autocommit(engine, "VACUUM webhook_events", "VACUUM jobs")
        if result is None:
            return None
        runs.append(result.summary())
    median = sorted(runs, key=lambda run: run["tps"])[len(runs) // 2]
    return {**median, "runs_tps": [run["tps"] for run in runs],
            "load_average": stack.load_average()}


def print_summary(result: dict[str, Any]) -> None:
    load = result["load"]
    print(f"search  {load['events']:,} events (table {load['table_mb']} MB, payload "
          f"{load['payload_bytes']} B as text), first page of {PAGE}; latency p50 / p99 ms")
    print(f"  {'option':26s} {'rare word':>19s} {'event id':>19s} {'common + failed':>19s} "
          f"{'index MB':>9s} {'build s':>8s} {'ingest/s':>9s}")
    rows = (("no index, full text", "none", "fts"), ("no index, ILIKE", "none", "ilike"),
            ("GIN full text (0008)", "fts", "fts"), ("GIN trigram, ILIKE", "trigram", "ilike"))
    for label, name, method in rows:
        option = result["options"].get(name)
        if not option:
            print(f"  {label:26s} not available")
            continue
        cells = [option["searches"][f"{method}_{kind}"] for kind in ("rare", "id", "common")]
        timings = " ".join(f"{c['p50_ms']:>9.2f}/{c['p99_ms']:<9.2f}" for c in cells)
        ingest = option["ingest"]["tps"] if option["ingest"] else float("nan")
        size = option["index_mb"] if option["index_mb"] is not None else 0
        build = option["build_seconds"] if option["build_seconds"] is not None else 0
        print(f"  {label:26s} {timings} {size:9.1f} {build:8.1f} {ingest:9.0f}")
    for name, ratios in result["ratios"].items():
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in ratios.items()))


# --- helpers -----------------------------------------------------------------------------


def _ratios(options: dict[str, Any]) -> dict[str, Any]:
    """Each option's search p50 and ingest rate against no index."""
    none = options["none"]
    out: dict[str, Any] = {}
    for name, method in (("fts", "fts"), ("trigram", "ilike")):
        option = options.get(name)
        if not option:
            continue
        out[name] = {
            f"{kind}_p50_speedup": _ratio(none["searches"][f"{method}_{kind}"]["p50_ms"],
                                          option["searches"][f"{method}_{kind}"]["p50_ms"])
            for kind in ("rare", "id", "common")}
        if option["ingest"] and none["ingest"]:
            out[name]["ingest_rate_vs_none"] = _ratio(option["ingest"]["tps"],
                                                      none["ingest"]["tps"])
    fts, trigram = options.get("fts"), options.get("trigram")
    if fts and trigram:
        out["trigram_vs_fts"] = {
            "index_size": _ratio(trigram["index_mb"], fts["index_mb"]),
            "build_seconds": _ratio(trigram["build_seconds"], fts["build_seconds"]),
            **{f"{kind}_p50": _ratio(trigram["searches"][f"ilike_{kind}"]["p50_ms"],
                                     fts["searches"][f"fts_{kind}"]["p50_ms"])
               for kind in ("rare", "id", "common")}}
        if trigram["ingest"] and fts["ingest"]:
            out["trigram_vs_fts"]["ingest_rate"] = _ratio(trigram["ingest"]["tps"],
                                                          fts["ingest"]["tps"])
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _trigram_available(engine: Engine) -> bool:
    with engine.connect() as conn:
        if not conn.execute(sa.text(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")).first():
            return False
    _autocommit(engine, "CREATE EXTENSION IF NOT EXISTS pg_trgm")
    return True


def _autocommit(engine: Engine, *statements: str) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for statement in statements:
            conn.execute(sa.text(statement))


def _index_mb(engine: Engine, name: str) -> float:
    with engine.connect() as conn:
        return _mb(conn.execute(sa.text("SELECT pg_relation_size(CAST(:n AS regclass))"),
                                {"n": name}).scalar_one())


def _mb(size: int) -> float:
    return round(size / 2**20, 1)
