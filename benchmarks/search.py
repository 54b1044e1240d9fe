"""`--only search`: what the event search costs on a large table, and what it costs the
ingest.

Loads Stripe-shaped events of 1-2 KB (search_events.sql, through INSERT ... SELECT
generate_series) with a job each (2% failed, 3% pending, those not due), then measures,
alternated (none, search, none, search, as `alternations` says):

- none: no search index at all (event_search empty, no GIN index anywhere);
- search: the product's search (migration 0017): every event's document in event_search
  with its GIN index (filled and built after the load, as the migration's backfill does),
  and the first page (50) of three searches through `shared.events.list_events`:
  - rare:   a word only one event holds (a charge id, as an operator pastes it);
  - id:     an event id;
  - common: a word most events hold (`usd`, `visa`, ...) with `--status failed`.

Each arm records the ingest's insert rate: pgbench running search_ingest.sql (the ingest's
EventJobInsert with payloads of the same shape) with `ingest_clients` clients, beside one
pgbench client draining the new jobs as the worker marks them (search_drain.sql: claim up
to 50 due jobs, mark them done, with the events' documents written in the search arm, as
queries.JobMarkDoneMany does, and without in the none arm). So the search arm's ingest pays
for everything search costs the machine, the GIN index's upkeep included, and the drain's
rate is the worker's side of it; the search arm also merges the GIN index's pending list
every MERGE_SECONDS, as the clock's sweep does. `ratios.search.ingest_rate_vs_none`: the mean of the
search arm's runs over the none arm's.

`--search-options expression,trigram` adds the older options for comparison: the GIN
expression index on webhook_events that the ingest kept up to date (migration 0008) and a
pg_trgm GIN trigram index searched with ILIKE '%text%' (pg_trgm is not in the embedded
pgserver); each takes minutes to build at a million rows. The benchmark's database is left
without a search index (dropped unless --keep-database).
"""

from __future__ import annotations

import random
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from benchmarks import history, pgbench, stack
from benchmarks.load import percentile
from webhooks.shared import events, queries
from webhooks.shared.events import EventFilter
from webhooks.shared.models import (
    EVENT_SEARCH_DOCUMENT,
    SEARCH_PENDING_LIST_KB,
    JobStatus,
    webhook_events,
)

HERE = Path(__file__).resolve().parent
FTS_INDEX = "ix_webhook_events_search_bounded"  # migration 0008's, the "expression" option
SEARCH_INDEX = "ix_event_search_document"
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
    alternations: int = 2  # none then search, this many times
    older: tuple[str, ...] = ()  # "expression", "trigram": the older options, after


SMOKE = Plan(events=20_000, searches=20, min_searches=2, budget_seconds=2, ingest_seconds=2,
             ingest_runs=1, warmup=0, alternations=1)
DRAIN_BATCH = 50
DRAIN_PAUSE_MS = 5  # between a drain's transactions, as a worker waits for its next wake-up
MERGE_SECONDS = 1.0  # the search arm's merges of the GIN pending list, as the clock's sweep

Search = Callable[[Connection, str, JobStatus | None], int]  # -> rows on the first page


def run(target: stack.Target, plan: Plan) -> dict[str, Any]:
    engine = target.engine()
    try:
        return _run(engine, target, plan)
    finally:
        engine.dispose()


def _run(engine: Engine, target: stack.Target, plan: Plan) -> dict[str, Any]:
    stack.reset(target)
    stack.autocommit(engine, f"DROP INDEX IF EXISTS {FTS_INDEX}",
                     f"DROP INDEX IF EXISTS {TRGM_INDEX}",
                     f"DROP INDEX IF EXISTS {SEARCH_INDEX}", "TRUNCATE event_search")
    loaded = load_events(engine, plan.events)
    with engine.begin() as conn:  # the history's pending jobs wait: the drain takes new ones
        conn.execute(sa.text("UPDATE jobs SET run_at = now() + interval '1 year' "
                             "WHERE status = 'pending'"))
    terms = _terms(engine, plan)
    result: dict[str, Any] = {"plan": asdict(plan), "load": loaded, "options": {},
                              "alternated": []}
    print(f"  loaded {plan.events:,} events in {loaded['seconds']} s "
          f"(table {loaded['table_mb']} MB, average payload {loaded['payload_bytes']} B)",
          flush=True)
    filled = fill_documents(engine)
    print(f"  documents written in {filled['seconds']} s", flush=True)
    options = result["options"]
    for turn in range(plan.alternations):
        stack.autocommit(engine, f"DROP INDEX IF EXISTS {SEARCH_INDEX}")
        none = _option(engine, target, plan, terms, index=None, searches={}, indexing=False)
        search = _option(engine, target, plan, terms, index=(
            SEARCH_INDEX, f"CREATE INDEX {SEARCH_INDEX} ON event_search USING gin (document) "
                          f"WITH (gin_pending_list_limit = {SEARCH_PENDING_LIST_KB})"),
            searches={"fts": _fts} if turn == 0 else {}, indexing=True)
        result["alternated"].append({"none": none["ingest"], "search": search["ingest"],
                                     "search_index_build_seconds": search["build_seconds"]})
        if turn == 0:
            options["none"], options["search"] = none, {**search, **filled}
    _older(engine, target, plan, terms, options)
    result["ratios"] = _ratios(options, result["alternated"])
    return result


def _older(engine: Engine, target: stack.Target, plan: Plan, terms: Terms,
           options: dict[str, Any]) -> None:
    """The older options (Plan.older), each alone on the tables."""
    if not plan.older:
        return
    stack.autocommit(engine, f"DROP INDEX IF EXISTS {SEARCH_INDEX}")
    if "expression" in plan.older:
        options["expression"] = _option(engine, target, plan, terms, index=(
            FTS_INDEX, f"CREATE INDEX {FTS_INDEX} ON webhook_events USING gin "
                       f"({EVENT_SEARCH_DOCUMENT})"), searches={}, indexing=False)
        stack.autocommit(engine, f"DROP INDEX {FTS_INDEX}")
    if "trigram" in plan.older and stack.create_extension(engine, "pg_trgm"):
        options["trigram"] = _option(engine, target, plan, terms, index=(
            TRGM_INDEX, f"CREATE INDEX {TRGM_INDEX} ON webhook_events USING gin "
                        f"({TRGM_DOCUMENT} gin_trgm_ops)"), searches={"ilike": _ilike},
            indexing=False)
        stack.autocommit(engine, f"DROP INDEX {TRGM_INDEX}")


def fill_documents(engine: Engine) -> dict[str, Any]:
    """Every event's search document in event_search (as migration 0017's backfill writes
    them), with no GIN index yet: the bulk load's way; the index is built after."""
    started = time.monotonic()

    def chunk(bounds: tuple[int, int]) -> None:
        with engine.begin() as conn:
            conn.execute(sa.text(f"""
                INSERT INTO event_search (provider, source, event_id, received_at, document)
                SELECT provider, source, event_id, received_at, {EVENT_SEARCH_DOCUMENT}
                FROM webhook_events WHERE id BETWEEN :first AND :last
                ON CONFLICT DO NOTHING
            """), {"first": bounds[0], "last": bounds[1]})

    with engine.connect() as conn:
        last = conn.execute(sa.text("SELECT coalesce(max(id), 0) FROM webhook_events")).scalar_one()
    with ThreadPoolExecutor(LOAD_CONNECTIONS) as pool:
        list(pool.map(chunk, [(first, first + LOAD_CHUNK - 1)
                              for first in range(1, last + 1, LOAD_CHUNK)]))
    stack.autocommit(engine, "VACUUM ANALYZE event_search")
    return {"documents_seconds": round(time.monotonic() - started, 1),
            "documents_mb": _mb(_relation_size(engine, "event_search")),
            "seconds": round(time.monotonic() - started, 1)}


# --- loading ----------------------------------------------------------------------------


def load_events(engine: Engine, count: int, *, unfinished: bool = True) -> dict[str, Any]:
    """`count` events received over the last 30 days (the newest last) and their jobs: 2%
    failed and 3% pending, the rest done; all done when not `unfinished` (a history that
    gives a worker nothing to do: benchmarks/growth.py)."""
    started = time.monotonic()
    with engine.begin() as conn:
        conn.execute(sa.text((HERE / "search_events.sql").read_text()))
    # Each day's rows in its day's partition, as the clock's partitions would have held them.
    history.create_empty(engine, history.past_days(1, 31, history.today(engine)))
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
    stack.autocommit(engine, "VACUUM ANALYZE webhook_events", "VACUUM ANALYZE jobs")
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
            index: tuple[str, str] | None, searches: dict[str, Search],
            indexing: bool) -> dict[str, Any]:
    """One option: its index built (timed), its searches timed, and the ingest's rate
    beside a drain that writes documents (indexing) or not."""
    name = index[0] if index else "none"
    print(f"  -- {name}", flush=True)
    built: dict[str, Any] = {"index": None, "build_seconds": None, "index_mb": None}
    if index is not None:
        started = time.monotonic()
        stack.autocommit(engine, "SET maintenance_work_mem = '1GB'", index[1],
                         "ANALYZE webhook_events", "ANALYZE event_search")
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
    ingest = _ingest(engine, target, plan, indexing)
    if ingest:
        print(f"  ingest (pgbench search_ingest.sql, {ingest['clients']} clients): "
              f"{ingest['tps']:.0f} inserts/s  p50 {ingest['p50_ms']} ms  "
              f"p99 {ingest['p99_ms']} ms; drain {ingest['drain_jobs_per_s']} jobs/s "
              f"({'with' if indexing else 'without'} documents)", flush=True)
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


def _ingest(engine: Engine, target: stack.Target, plan: Plan,
            indexing: bool) -> dict[str, Any] | None:
    """Inserts per second of the ingest's statement, beside one client draining the new
    jobs (search_drain.sql, writing their documents if `indexing`); the rows they add are
    deleted afterwards."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="search-drain-") as folder:
        drain = drain_script(Path(folder), indexing)
        for _ in range(plan.ingest_runs):
            with engine.connect() as conn:
                last_id, last_job = conn.execute(sa.text(
                    "SELECT (SELECT max(id) FROM webhook_events), (SELECT max(id) FROM jobs)"
                )).one()
            stack.autocommit(engine, "CHECKPOINT")
            stop = threading.Event()
            with ThreadPoolExecutor(3) as pool:
                drained = pool.submit(pgbench.run, target.database_url, drain, 1,
                                      seconds=plan.ingest_seconds)
                merged = pool.submit(_merge_pending, engine, stop) if indexing else None
                result = pgbench.run_ingest(target.database_url, plan.ingest_clients,
                                            seconds=plan.ingest_seconds,
                                            template=HERE / "search_ingest.sql")
                drained.result()
                stop.set()
                merges = merged.result() if merged else 0
            with engine.begin() as conn:
                done = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE id > :id AND "
                                            "status = 'done'"), {"id": last_job}).scalar_one()
                history.forget_since(conn, last_id, last_job)
            stack.autocommit(engine, "VACUUM webhook_events", "VACUUM jobs", "VACUUM event_search")
            if result is None:
                return None
            runs.append({**result.summary(), "drained_jobs": done, "merges": merges,
                         "drain_jobs_per_s": round(done / plan.ingest_seconds, 1)})
    median = sorted(runs, key=lambda run: run["tps"])[len(runs) // 2]
    return {**median, "runs_tps": [run["tps"] for run in runs],
            "load_average": stack.load_average()}


def _merge_pending(engine: Engine, stop: threading.Event) -> int:
    """What the clock's sweep does for the search index (queries.EventSearchFlush), every
    MERGE_SECONDS (more often than SWEEP_INTERVAL_SECONDS's default) while the arm runs;
    returns how many merges ran."""
    merges = 0
    while not stop.wait(MERGE_SECONDS):
        with engine.begin() as conn:
            conn.execute(queries.EventSearchFlush)
        merges += 1
    return merges


def drain_script(folder: Path, indexing: bool) -> Path:
    """search_drain.sql, with the documents written (queries.JobMarkDoneMany's
    EVENT_SEARCH_INSERT) or not."""
    text = (HERE / "search_drain.sql").read_text()
    indexed = (f", indexed AS ({queries.EVENT_SEARCH_INSERT.strip()})" if indexing else "")
    path = folder / f"search_drain{'_indexing' if indexing else ''}.sql"
    path.write_text(text.replace("-- INDEXED", indexed).replace(
        "DRAIN_BATCH", str(DRAIN_BATCH)).replace("DRAIN_PAUSE_MS", str(DRAIN_PAUSE_MS)))
    return path


def print_summary(result: dict[str, Any]) -> None:
    load = result["load"]
    print(f"search  {load['events']:,} events (table {load['table_mb']} MB, payload "
          f"{load['payload_bytes']} B as text), first page of {PAGE}; latency p50 / p99 ms")
    print(f"  {'option':26s} {'rare word':>19s} {'event id':>19s} {'common + failed':>19s} "
          f"{'index MB':>9s} {'build s':>8s} {'ingest/s':>9s} {'drain/s':>8s}")
    rows = (("no search index", "none", None), ("event_search (0017)", "search", "fts"),
            ("GIN expression (0008)", "expression", None),
            ("GIN trigram, ILIKE", "trigram", "ilike"))
    for label, name, method in rows:
        option = result["options"].get(name)
        if not option:
            continue
        cells = [option["searches"].get(f"{method}_{kind}") for kind in ("rare", "id", "common")]
        timings = " ".join(f"{c['p50_ms']:>9.2f}/{c['p99_ms']:<9.2f}" if c else f"{'':19s}"
                           for c in cells)
        ingest = option["ingest"] or {}
        print(f"  {label:26s} {timings} {option['index_mb'] or 0:9.1f} "
              f"{option['build_seconds'] or 0:8.1f} {ingest.get('tps', float('nan')):9.0f} "
              f"{ingest.get('drain_jobs_per_s', float('nan')):8.0f}")
    for turn, pair in enumerate(result.get("alternated", []), 1):
        print(f"  turn {turn}: ingest/s none {_tps(pair['none'])}, search "
              f"{_tps(pair['search'])}")
    for name, ratios in result["ratios"].items():
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in ratios.items()))


def _tps(ingest: dict[str, Any] | None) -> str:
    return f"{ingest['tps']:.0f}" if ingest else "-"


# --- helpers -----------------------------------------------------------------------------


def _ratios(options: dict[str, Any], alternated: list[dict[str, Any]]) -> dict[str, Any]:
    """The search's ingest rate and drain rate against no index (the means of the
    alternated runs), and each older option's ingest rate against no index."""
    out: dict[str, Any] = {}
    none = [pair["none"] for pair in alternated if pair["none"]]
    search = [pair["search"] for pair in alternated if pair["search"]]
    if none and search:
        out["search"] = {
            "ingest_rate_vs_none": _ratio(_mean(search, "tps"), _mean(none, "tps")),
            "ingest_p99_vs_none": _ratio(_mean(search, "p99_ms"), _mean(none, "p99_ms")),
            "drain_rate_vs_none": _ratio(_mean(search, "drain_jobs_per_s"),
                                         _mean(none, "drain_jobs_per_s"))}
        rare = options["search"]["searches"].get("fts_rare")
        if rare:
            out["search"]["rare_p99_ms"] = rare["p99_ms"]
    for name in ("expression", "trigram"):
        option = options.get(name)
        if option and option["ingest"] and none:
            out[name] = {"ingest_rate_vs_none": _ratio(option["ingest"]["tps"],
                                                       _mean(none, "tps"))}
    return out


def _mean(runs: list[dict[str, Any]], key: str) -> float:
    return sum(float(run[key]) for run in runs) / len(runs)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _index_mb(engine: Engine, name: str) -> float:
    return _mb(_relation_size(engine, name))


def _relation_size(engine: Engine, name: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_total_relation_size(CAST(:n AS regclass))"),
                                {"n": name}).scalar_one())


def _mb(size: int) -> float:
    return round(size / 2**20, 1)
