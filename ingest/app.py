"""The Flask app factory. Nothing is built at import time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.proxy_fix import ProxyFix

from webhooks.ingest import allowlist, health, webhooks
from webhooks.ingest.waker import Waker
from webhooks.shared import db, tracing
from webhooks.shared.settings import Settings


def create_app(settings: Settings | None = None, *, threads: int | None = None) -> Flask:
    """threads: the server's app threads in this process (default WEB_THREADS); each may
    hold one connection."""
    settings = settings or Settings.from_env()
    threads = threads or settings.web_threads
    app = Flask(__name__)
    tracing.configure(settings, tracing.WEB_SERVICE, flask_app=app)  # before any connection
    # One byte over the limit: werkzeug caps a streamed (chunked) body at this, and
    # webhooks._read_body must be able to read limit + 1 bytes to tell "over" from "at".
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes + 1
    app.extensions["settings"] = settings
    app.extensions["engine"] = db.create_engine(settings, pool_size=threads, autocommit=True)
    app.extensions["waker"] = Waker(settings)
    app.extensions["allowlists"] = allowlist.for_sources(settings)
    # Every configured source by its label, the path after /webhooks/: looked up per
    # delivery, built once.
    app.extensions["sources"] = {source.label: source for source in settings.sources}
    # /metrics from the start (SPEC "Observability"): the ingest's counters at 0 for every
    # configured source, and what the database gauges show before the tables hold a row.
    webhooks.count_from_start(list(settings.sources))
    app.extensions["configured"] = health.configured(settings)
    # The client's address, as the app sees it in REMOTE_ADDR; ingest.front asks it of a
    # request's headers before the app runs.
    app.extensions["client_address"] = _client_address(settings.trusted_proxies)
    if settings.trusted_proxies:
        app.wsgi_app = _behind_proxies(app.wsgi_app, settings.trusted_proxies)  # type: ignore[method-assign]
    app.register_blueprint(webhooks.blueprint)
    app.register_blueprint(health.blueprint)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    return app


def _behind_proxies(app: Any, trusted: int) -> Any:
    """REMOTE_ADDR becomes the X-Forwarded-For entry the Nth proxy from us appended,
    counted from the right; what lies left of it came from the client and may be forged.
    With fewer entries than N, the socket's peer stays. Nothing else (scheme, host) is
    taken from the proxies' headers: nothing here needs it."""
    return ProxyFix(app, x_for=trusted, x_proto=0, x_host=0, x_port=0, x_prefix=0)


def _client_address(trusted: int) -> Callable[[dict[str, Any]], str | None]:
    def remote_addr(environ: dict[str, Any], _: Any) -> list[str | None]:
        return [environ.get("REMOTE_ADDR")]

    found = _behind_proxies(remote_addr, trusted) if trusted else remote_addr

    def client_address(environ: dict[str, Any]) -> str | None:
        address: str | None = found(dict(environ), None)[0]
        return address

    return client_address


def _http_error(error: HTTPException) -> tuple[Response, int]:
    response = jsonify({"error": error.description})
    if error.code == 413:  # werkzeug's cap on a streamed body: the rest is left unread
        webhooks.close_connection(response)
    return response, error.code or 500


def _unexpected_error(error: Exception) -> tuple[Response, int]:
    # Nothing was committed (the transaction rolled back); ask the provider to retry.
    from flask import current_app

    current_app.logger.exception("unexpected error")
    webhooks.count_unexpected_refusal(error)
    response = jsonify({"error": "internal error, retry later"})
    response.headers["Retry-After"] = "5"
    return response, 503
