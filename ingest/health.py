"""Liveness, readiness and metrics endpoints."""

from __future__ import annotations

import sqlalchemy as sa
from flask import Blueprint, Response, current_app, jsonify

from shared import metrics, providers, queries

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


@blueprint.get("/readyz")
def readyz() -> tuple[Response, int]:
    try:
        with current_app.extensions["engine"].connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.SQLAlchemyError:
        return jsonify({"status": "database unavailable"}), 503
    return jsonify({"status": "ready"}), 200


@blueprint.get("/metrics")
def metrics_text() -> Response:
    _refresh_queue_depth()
    body, content_type = metrics.render()
    return Response(body, content_type=content_type)


def _refresh_queue_depth() -> None:
    """Queue depth is read from the tables (the truth) at scrape time; both counts use the
    partial indexes on pending rows."""
    try:
        with current_app.extensions["engine"].connect() as conn:
            jobs = conn.execute(queries.JobCountDue).scalar_one()
            emails = conn.execute(queries.OutboxCountDue).scalar_one()
            reconciliation = conn.execute(queries.ReconcileState).all()
            paused = set(conn.execute(queries.ProvidersPaused).scalars())
    except sa.exc.SQLAlchemyError:
        return
    metrics.queue_depth.labels("jobs").set(jobs)
    metrics.queue_depth.labels("outbox").set(emails)
    for provider in providers.PROVIDERS:
        metrics.provider_paused.labels(provider).set(1 if provider in paused else 0)
    for row in reconciliation:
        metrics.reconcile_runs.labels(row.provider).set(row.runs)
        metrics.reconcile_failures.labels(row.provider).set(row.failures)
        metrics.reconciled_events.labels(row.provider).set(row.found)
        if row.last_success is not None:
            metrics.reconcile_last_success.labels(row.provider).set(float(row.last_success))
