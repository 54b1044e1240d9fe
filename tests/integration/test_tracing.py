"""Traces (docs/observability.md): a real `webhooks web` and `webhooks worker` export over
OTLP/HTTP to a receiver on loopback that decodes the protobuf as a collector does. One new
delivery makes one trace: the ingest's request, the job's handler and its statements, the
email's Postmark call. Without the variable, nothing of OpenTelemetry is loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import requests
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from tests.fakes.otlp_collector import OtlpCollector, ReceivedSpan
from tests.fakes.postmark_server import DEFAULT_TOKEN, FakePostmark
from tests.integration.test_worker_process import env_for, scalar
from webhooks.shared.settings import Settings

SERVER_KIND = 2  # SpanKind SERVER in OTLP
CLIENT_KIND = 3


def _trace(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.trace_id == trace_id]


def _request_span(spans: list[ReceivedSpan], event_id: str,
                  duplicate: bool) -> ReceivedSpan | None:
    for span in spans:
        if (span.service == "webhooks-web" and span.kind == SERVER_KIND
                and span.attributes.get("webhooks.event_id") == event_id
                and span.attributes.get("webhooks.duplicate") is duplicate):
            return span
    return None


def _complete(collector: OtlpCollector, event_id: str) -> bool:
    """The request, its job and the job's Postmark send have all arrived."""
    spans = collector.spans()
    request = _request_span(spans, event_id, duplicate=False)
    if request is None:
        return False
    names = {span.name for span in _trace(spans, request.trace_id)}
    return any(name.startswith("job stripe") for name in names) and "postmark send" in names


def test_one_trace_from_the_providers_request_to_postmark(
        settings: Settings, clean_db: Engine, tmp_path: Path) -> None:
    log = tmp_path / "processes.log"
    event = factories.stripe_event("invoice.paid", factories.invoice(
        "in_traced", customer="cus_traced", amount=1250, email="payer@example.com"))
    body = json.dumps(event).encode()
    headers = {"Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)}
    with OtlpCollector() as collector, FakePostmark() as postmark:
        env = env_for(settings, SWEEP_INTERVAL_SECONDS="600",
                      OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, OTEL_BSP_SCHEDULE_DELAY="100",
                      POSTMARK_SERVER_TOKEN=DEFAULT_TOKEN, POSTMARK_API_URL=postmark.url)
        worker = processes.start(["worker", "--processes", "1", "--threads", "2"], env, log)
        try:
            with processes.web_server(env, log, workers=1) as base:
                for _ in range(2):  # the second is a duplicate: its own short trace
                    answer = requests.post(f"{base}/webhooks/stripe", data=body,
                                           headers=headers, timeout=10)
                    assert answer.status_code == 200, answer.text
                processes.wait_until(lambda: scalar(
                    clean_db, "SELECT status FROM outbox") == "sent", timeout=60)
                processes.wait_until(lambda: _complete(collector, event["id"]), timeout=30)
        finally:
            processes.stop(worker)
        spans = collector.spans()
        assert collector.refused == 0

    request = _request_span(spans, event["id"], duplicate=False)
    assert request is not None
    assert request.parent_span_id == ""  # the delivery starts the trace
    assert request.attributes["webhooks.provider"] == "stripe"
    assert request.attributes["webhooks.event_type"] == "invoice.paid"
    # (the instrumentation's semantic conventions name it one way or the other)
    assert request.attributes.get("http.response.status_code",
                                  request.attributes.get("http.status_code")) == 200
    trace = _trace(spans, request.trace_id)
    by_id = {span.span_id: span for span in trace}

    # The ingest's one statement, inside the request.
    web_sql = [s for s in trace if s.service == "webhooks-web" and s.kind == CLIENT_KIND
               and ("db.system" in s.attributes or "db.system.name" in s.attributes)]
    assert any(s.parent_span_id == request.span_id for s in web_sql)

    # The worker's job span joins the trace as the request's child (the stored traceparent).
    jobs = [s for s in trace if s.name == "job stripe invoice.paid"]
    assert len(jobs) == 1
    job = jobs[0]
    assert job.service == "webhooks-worker"
    assert job.parent_span_id == request.span_id
    assert job.attributes["webhooks.event_id"] == event["id"]
    assert job.attributes["webhooks.attempt"] == 1
    assert job.attributes["webhooks.outcome"] == "credited"
    handler_sql = [s for s in trace if s.parent_span_id == job.span_id
                   and s.service == "webhooks-worker"]
    assert len(handler_sql) >= 2  # the handler's statements: ledger, account, outbox

    # The email's Postmark call, in the same trace, under the job that queued it.
    sends = [s for s in trace if s.name == "postmark send"]
    assert len(sends) == 1
    send = sends[0]
    assert send.parent_span_id == job.span_id
    assert send.attributes["webhooks.idempotency_key"] == "receipt:in_traced"
    assert send.attributes["webhooks.email_outcome"] == "sent"
    assert send.attributes["postmark.message_id"]
    http = [s for s in trace if s.parent_span_id == send.span_id and s.kind == CLIENT_KIND]
    assert len(http) == 1
    assert http[0].attributes.get("url.full", http[0].attributes.get("http.url", "")) \
        .startswith(postmark.url)
    assert all(by_id.get(s.parent_span_id) is not None or s is request for s in trace)

    # The duplicate: answered, in a trace of its own, with no job.
    duplicate = _request_span(spans, event["id"], duplicate=True)
    assert duplicate is not None and duplicate.trace_id != request.trace_id
    assert not [s for s in _trace(spans, duplicate.trace_id) if s.name.startswith("job ")]


def test_without_the_variable_no_tracing_is_loaded(
        settings: Settings, clean_db: Engine) -> None:
    """Web and worker modules, a delivery through the app, a job applied: no exporter, no
    instrumentation, no tracer provider in the process. (redis-py imports OpenTelemetry's
    API for its own, unconfigured, observability when the package is installed; that is
    not ours, and sets up nothing.)"""
    program = f"""
import json, sys
from tests import factories
from webhooks.shared.settings import Settings
from webhooks.ingest.app import create_app
import webhooks.worker.actors
from webhooks.worker import jobs
settings = Settings.from_env()
body = json.dumps(factories.stripe_event("invoice.paid", factories.invoice())).encode()
client = create_app(settings).test_client()
answer = client.post("/webhooks/stripe", data=body, headers={{
    "Stripe-Signature": factories.stripe_signature(body, {STRIPE_SECRET!r})}})
assert answer.status_code == 200, answer.data
assert jobs.process_batch(webhooks.worker.actors.engine(), settings).done == 1
from webhooks.shared import tracing
assert not tracing.enabled()
loaded = sorted(name for name in sys.modules
                if name.startswith(("opentelemetry.instrumentation", "opentelemetry.exporter"))
                or name == "opentelemetry.sdk.trace")
if "opentelemetry.trace" in sys.modules:
    from opentelemetry import trace
    loaded += [type(trace.get_tracer_provider()).__name__]
print(json.dumps(loaded))
"""
    env = {key: value for key, value in env_for(settings).items()}
    env.update({"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) in ([], ["ProxyTracerProvider"])
