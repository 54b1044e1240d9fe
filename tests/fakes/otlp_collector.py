"""An OTLP/HTTP trace receiver on loopback, for tests: what a collector would get.

It accepts `POST /v1/traces` with an ExportTraceServiceRequest in protobuf (gzip or not),
decodes it with opentelemetry-proto, as a collector does, and keeps every span with its
resource's service name. Anything else is refused, so a misconfigured exporter shows.

    with OtlpCollector() as collector:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.url
        ...
        collector.spans()  # [ReceivedSpan, ...]
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int
    attributes: dict[str, Any] = field(hash=False)
    links: tuple[str, ...]  # the span ids this span links to
    status_code: int  # 0 unset, 1 ok, 2 error


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return getattr(value, which) if which else None


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    received = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                received.append(ReceivedSpan(
                    service=str(resource.get("service.name", "")), name=span.name,
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(), kind=span.kind,
                    attributes={a.key: _value(a.value) for a in span.attributes},
                    links=tuple(link.span_id.hex() for link in span.links),
                    status_code=span.status.code))
    return received


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != \
                "application/x-protobuf":
            self.server.refused += 1
            self._answer(404, b"")
            return
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        spans = decode(body) if self.server.decode else []
        with self.server.lock:
            self.server.received.extend(spans)
            self.server.requests += 1
            self.server.bytes += len(body)
        self._answer(200, ExportTraceServiceResponse().SerializeToString())

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, decode: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.decode = decode
        self.lock = threading.Lock()
        self.received: list[ReceivedSpan] = []
        self.refused = 0
        self.requests = 0
        self.bytes = 0


class OtlpCollector:
    """decode=False: only count the export requests and their bytes (a benchmark's
    receiver, which should cost the measured machine as little as it can)."""

    def __init__(self, decode: bool = True) -> None:
        self._server = _Server(decode)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base endpoint (OTEL_EXPORTER_OTLP_ENDPOINT); exporters append /v1/traces."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def refused(self) -> int:
        return self._server.refused

    @property
    def exports(self) -> tuple[int, int]:
        """(requests, bytes) received."""
        with self._server.lock:
            return self._server.requests, self._server.bytes

    def spans(self) -> list[ReceivedSpan]:
        with self._server.lock:
            return list(self._server.received)

    def __enter__(self) -> OtlpCollector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
