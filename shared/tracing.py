"""OpenTelemetry traces over OTLP/HTTP, when OTEL_EXPORTER_OTLP_ENDPOINT is set
(docs/observability.md): one trace per new delivery, from the ingest's request through the job's
handler to the email's Postmark call.

Unset, nothing of it is set up: `configure` returns at once, without importing
OpenTelemetry, and every other function here answers from one module global (no span, no
context, None) at the cost of a call.

The official instrumentations make the spans within a process: Flask (the request),
psycopg (each statement, also those shared/db.py runs on the driver's cursor, which
SQLAlchemy's instrumentation would not see) and requests (postmarker's calls to Postmark).
What none covers is the hop through the database, written here: the ingest stores its
request span's W3C `traceparent` with the job (jobs.trace_context), the worker starts the
job's span as its child, and a handler's queued email stores the job span's
(outbox.trace_context), so the dispatcher's Postmark call joins the same trace. The
exporter, sampler and service name follow the standard OTEL_* variables; the service name
defaults to webhooks-web or webhooks-worker.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask
    from opentelemetry.trace import Tracer

    from webhooks.shared.settings import Settings

WEB_SERVICE = "webhooks-web"
WORKER_SERVICE = "webhooks-worker"

_tracer: Tracer | None = None


class _NoSpan:
    """What the span functions give while tracing is off: accepts everything, keeps nothing."""

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass


NO_SPAN = _NoSpan()


def configure(settings: Settings, default_service: str, *,
              flask_app: Flask | None = None) -> bool:
    """Set up the tracer provider and the instrumentations of this process, if the
    environment asks for traces; call it before any engine is created (the psycopg
    instrumentation hooks the connections made after it). True if tracing is on.

    In a forking server, call it in each process: the exporter's thread does not survive
    a fork."""
    global _tracer
    if not settings.tracing:
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.requests import RequestsInstrumentor
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if _tracer is None:
        service = settings.otel_service_name or default_service
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        PsycopgInstrumentor().instrument(tracer_provider=provider)
        RequestsInstrumentor().instrument(tracer_provider=provider)
        _tracer = trace.get_tracer("webhooks")
    if flask_app is not None:
        from opentelemetry.instrumentation.flask import FlaskInstrumentor

        FlaskInstrumentor.instrument_app(flask_app, excluded_urls="metrics,health,ready")
    return True


def enabled() -> bool:
    return _tracer is not None


def traceparent() -> str | None:
    """The current span's W3C traceparent, to store with a row; None without tracing."""
    if _tracer is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def annotate(attributes: Mapping[str, Any]) -> None:
    """Add attributes to the current span (the ingest's request span, say)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(dict(attributes))


@contextmanager
def span(name: str, parent: str | None, attributes: Mapping[str, Any]) -> Iterator[Any]:
    """A span, current inside the block, that is the child of a stored traceparent (a new
    trace when there is none). An exception leaving the block is recorded on it."""
    if _tracer is None:
        yield NO_SPAN
        return
    with _tracer.start_as_current_span(name, context=_extract(parent),
                                       attributes=dict(attributes)) as current:
        yield current


@contextmanager
def spans(name: str, parents: Sequence[str | None],
          attributes: Sequence[Mapping[str, Any]]) -> Iterator[list[Any]]:
    """One span per stored traceparent over the same work (one Postmark request for the
    emails of several deliveries): each delivery's trace shows the call. The first is
    current inside the block, so the call's own span (requests) is its child; the others
    link to it."""
    if _tracer is None:
        yield [NO_SPAN] * len(parents)
        return
    from opentelemetry import trace

    if not parents:
        yield []
        return
    first = _tracer.start_span(name, context=_extract(parents[0]),
                               attributes=dict(attributes[0]))
    link = trace.Link(first.get_span_context())
    others = [_tracer.start_span(name, context=_extract(parent), attributes=dict(extra),
                                 links=[link])
              for parent, extra in zip(parents[1:], attributes[1:], strict=True)]
    every = [first, *others]
    try:
        with trace.use_span(first, end_on_exit=False, record_exception=False,
                            set_status_on_exception=False):
            yield every
    except BaseException as error:
        for each in every:
            each.record_exception(error)
            each.set_status(trace.Status(trace.StatusCode.ERROR, str(error)[:200]))
        raise
    finally:
        for each in every:
            each.end()


def _extract(parent: str | None) -> Any:
    if not parent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": parent})
