"""The metric names PromQL expressions use, checked against a real scrape of web's /metrics
(the alert rules' and the dashboard's tests): a renamed metric fails them."""

from __future__ import annotations

import json
import re

from prometheus_client.parser import text_string_to_metric_families

from tests import factories
from tests.conftest import STRIPE_SECRET
from webhooks.ingest.app import create_app
from webhooks.shared.settings import Settings

# Identifiers that are PromQL, not metrics: functions, aggregations, keywords.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "by", "without", "rate", "irate", "increase",
    "delta", "deriv", "histogram_quantile", "min_over_time", "max_over_time",
    "avg_over_time", "changes", "resets", "time", "vector", "scalar", "offset", "on",
    "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "le", "topk",
    "bottomk", "clamp_min", "clamp_max", "abs", "absent", "label_replace", "timestamp",
}
SUFFIXES = ("_bucket", "_sum", "_count")


def metric_names(expr: str) -> set[str]:
    """Names of the series an expression selects (label matchers, strings, durations and
    template variables removed)."""
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # range selectors
    expr = re.sub(r"\$\w+", " ", expr)  # Grafana variables ($__rate_interval)
    expr = re.sub(r'"[^"]*"', " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {word for word in words if word not in PROMQL_WORDS and not word.isdigit()
            and "_" in word}


def scrape(settings: Settings) -> str:
    """web's /metrics after a delivery, its duplicate and a bad signature, so that the
    ingest's labelled series exist."""
    client = create_app(settings).test_client()
    body = json.dumps(factories.stripe_event("invoice.paid", factories.invoice())).encode()
    answer = client.post("/webhooks/stripe", data=body, headers={
        "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})
    assert answer.status_code == 200
    duplicate = client.post("/webhooks/stripe", data=body, headers={
        "Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)})
    assert duplicate.json["duplicate"] is True
    client.post("/webhooks/stripe", data=body, headers={"Stripe-Signature": "t=1,v1=bad"})
    return str(client.get("/metrics").get_data(as_text=True))


def exposed(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        if family.type == "counter":  # the parser drops the suffix from the family's name
            names.add(f"{family.name}_total")
        for sample in family.samples:
            names.add(sample.name)
    return names


def base_name(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def assert_on_metrics(names: set[str], settings: Settings) -> None:
    on_metrics = exposed(scrape(settings))
    missing = {name for name in names
               if name not in on_metrics and base_name(name) not in on_metrics}
    assert not missing, f"not on /metrics: {sorted(missing)}"
