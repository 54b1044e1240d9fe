"""The ingest app as other WSGI servers load it, for the server comparison: logging is
configured as `webhooks web` configures it, so every candidate does the same work."""

from __future__ import annotations

from flask import Flask


def app() -> Flask:
    from ingest.app import create_app
    from shared.logs import configure_logging
    from shared.settings import Settings

    settings = Settings.from_env()
    configure_logging(settings)
    return create_app(settings)
