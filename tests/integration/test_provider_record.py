"""Adding a provider is one record (CONTRIBUTING.md, "Adding a provider"): a provider
defined in this file alone, registered for the test, is verified at its URLs, deduplicated,
configured per source (a named source with an option of its own, its own credentials),
reconciled against its events API (a fake served here) and its jobs run through its step
before a handler, with no other file of the project touched."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from webhooks.ingest.app import create_app
from webhooks.shared import db, handlers, providers, reconciliation
from webhooks.shared import variables as v
from webhooks.shared.errors import ConfigError, InvalidSignature, MissingVariable
from webhooks.shared.providers import http
from webhooks.shared.providers.base import (
    Delivery,
    Headers,
    HmacScheme,
    NoEffect,
    Option,
    PendingJob,
    Provider,
    SecretFormat,
    Source,
    header,
    hex_digest,
    optional_type,
    parse_object,
    require_id,
)
from webhooks.shared.providers.events_api import EventsAPI, Fetched, Listing
from webhooks.shared.settings import Settings
from webhooks.worker import jobs

# --- the provider: Acme signs `sha256=<hex HMAC of the body>`, ids and types in the body --

SIGNATURE = HmacScheme("Acme-Signature", hex_digest, prefix="sha256=")


def verify(body: bytes, headers: Headers, source: Source, tolerance: int,
           now: float) -> Delivery:
    index = SIGNATURE.verify(source.secrets, body, [header(headers, SIGNATURE.header).strip()])
    payload = parse_object(body)
    return Delivery(event_id=require_id(payload.get("id"), "event id"),
                    event_type=optional_type(payload.get("type")), payload=payload,
                    secret_index=index)


def sign(body: bytes, secret: str, now: float) -> dict[str, str]:
    return {SIGNATURE.header: SIGNATURE.sign(secret, body)}


API_KEY = Option("api_key", "API_KEY", v.text, None, "an Acme source's API key",
                 "unset: not reconciled", default_doc="Acme's API key",
                 topic=v.Topic.RECONCILIATION)
# A named source's own option: which region's events take effect at it.
REGION = Option("region", "REGION", v.choice("us", "eu"), "us", "the region an Acme source "
                "serves", "`us`", default_doc="the default Acme source's region")


class AcmeEvents:
    """`GET /events?since=<unix>` pages (`next` a path), the events whole in the list."""

    def __init__(self, api_key: str, api_base: str) -> None:
        self.api = http.Api(api_base, {"Authorization": f"Bearer {api_key}"})

    def pages(self, since: datetime) -> Iterator[list[Listing]]:
        url: str | None = f"{self.api.base}/events?since={int(since.timestamp())}"
        while url:
            body, _ = self.api.get_json(url)
            yield [Listing(event["id"], datetime.fromtimestamp(event["created"], UTC),
                           event["type"], json.dumps(event).encode())
                   for event in body["data"]]
            url = f"{self.api.base}{body['next']}" if body.get("next") else None

    def fetch(self, listing: Listing) -> Fetched:  # every list carries whole events
        raise AssertionError("not called: the list carries each event")


def events_api(source: Source, api_base: str) -> EventsAPI:
    return AcmeEvents(source.credentials or "", api_base)


def before_handler(job: PendingJob) -> Any:
    """An event of another region than its source's is done with no effect; the others
    reach the handler with their source's region."""
    region = REGION.of(job.source) if job.source is not None else REGION.default
    if job.payload.get("region", region) != region:
        return NoEffect(f"no effect: region {job.payload['region']}", "another region's event")
    return {**job.payload, "served_by": region}


ACME = Provider(
    name="acme", title="Acme", secret_variable="ACME_WEBHOOK_SECRET",
    secret_format=SecretFormat.HEX, verify=verify, sign=sign, signed_event_id=True,
    headers="`Acme-Signature`", event_id="body `id`", event_type="body `type`",
    credentials=API_KEY, options=(REGION,), api_base="https://api.acme.invalid",
    events_api=events_api, events_api_needs=(API_KEY,), before_handler=before_handler,
)

# --- its fake events API -----------------------------------------------------------------

NOW = datetime.now(UTC)
KEY_EU = "acme_key_eu"


def acme_event(event_id: str, region: str = "eu", minutes_ago: int = 10) -> dict[str, Any]:
    return {"id": event_id, "type": "order.paid", "region": region, "amount": 1200,
            "created": int((NOW - timedelta(minutes=minutes_ago)).timestamp())}


class FakeAcme(ThreadingHTTPServer):
    """Two pages of events, for the key KEY_EU only."""

    def __init__(self, pages: list[list[dict[str, Any]]]) -> None:
        super().__init__(("127.0.0.1", 0), _AcmeHandler)
        self.event_pages, self.requests = pages, 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _AcmeHandler(BaseHTTPRequestHandler):
    server: FakeAcme

    def do_GET(self) -> None:
        self.server.requests += 1
        if self.headers.get("Authorization") != f"Bearer {KEY_EU}":
            self.send_response(401)
            self.end_headers()
            return
        page = int(self.path.partition("page=")[2] or 0)
        more = page + 1 < len(self.server.event_pages)
        body = json.dumps({"data": self.server.event_pages[page],
                           "next": f"/events?page={page + 1}" if more else None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def acme() -> Iterator[Provider]:
    with providers.registered(ACME) as record:
        yield record


@pytest.fixture()
def fake_api() -> Iterator[FakeAcme]:
    server = FakeAcme([[acme_event("ord_1"), acme_event("ord_2")],
                       [acme_event("ord_3", region="us", minutes_ago=5)]])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture()
def acme_settings(acme: Provider, settings: Settings, fake_api: FakeAcme) -> Settings:
    return Settings.from_env({
        "DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
        "JOB_RETRY_BASE_SECONDS": "0", "ACME_WEBHOOK_SECRET": "acme-secret",
        "ACME_SOURCES": "eu", "ACME_EU_WEBHOOK_SECRET": "acme-eu-secret",
        "ACME_EU_REGION": "eu", "ACME_EU_API_KEY": KEY_EU, "ACME_API_BASE": fake_api.url})


@pytest.fixture()
def seen() -> Iterator[list[tuple[str, str, str]]]:
    found: list[tuple[str, str, str]] = []

    @handlers.handler("acme", "order.paid")
    def record(ctx: handlers.JobContext) -> None:
        found.append((ctx.event_id, ctx.source, ctx.payload["served_by"]))

    yield found
    handlers._registry.pop(("acme", "order.paid"))


def post(client: Any, path: str, event: dict[str, Any], secret: str) -> Any:
    body = json.dumps(event).encode()
    return client.post(f"/webhooks/{path}", data=body, headers=sign(body, secret, 0))


def rows(engine: Engine, statement: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(statement))]


def test_a_provider_is_one_record_its_sources_and_options_from_its_variables(
        acme_settings: Settings) -> None:
    default, eu = acme_settings.sources.get("acme"), acme_settings.sources.get("acme", "eu")
    assert default is not None and eu is not None
    assert (default.secrets, default.credentials, REGION.of(default)) == (
        ("acme-secret",), None, "us")
    assert (eu.label, eu.secrets, eu.credentials, REGION.of(eu)) == (
        "acme/eu", ("acme-eu-secret",), KEY_EU, "eu")
    assert "acme" in providers.names() and "acme" in providers.reconciled()
    assert [source.label for source in reconciliation.configured(acme_settings)
            if source.provider == "acme"] == ["acme/eu"]  # the default source has no key
    with pytest.raises(MissingVariable, match="ACME_API_KEY"):
        reconciliation.source_for(acme_settings, "acme")
    with pytest.raises(ConfigError, match="ACME_EU_REGION"):
        Settings.from_env({"ACME_SOURCES": "eu", "ACME_EU_WEBHOOK_SECRET": "s",
                           "ACME_EU_REGION": "mars"})
    with pytest.raises(InvalidSignature):  # signed for the default source, posted to eu
        body = json.dumps(acme_event("ord_x")).encode()
        ACME.verify(body, sign(body, "acme-secret", 0), eu, 300, 0)


def test_a_providers_deliveries_are_verified_deduplicated_and_run_once(
        acme_settings: Settings, clean_db: Engine, seen: list[tuple[str, str, str]]) -> None:
    client = create_app(acme_settings).test_client()
    event = acme_event("ord_1")
    assert post(client, "acme/eu", event, "acme-secret").status_code == 400  # eu's secret only
    first = post(client, "acme/eu", event, "acme-eu-secret")
    assert first.status_code == 200 and first.json["duplicate"] is False
    assert post(client, "acme/eu", event, "acme-eu-secret").json["duplicate"] is True
    # One logical event whichever source carries it (the record's dedup: the provider's).
    assert post(client, "acme", event, "acme-secret").json["duplicate"] is True
    assert post(client, "acme", acme_event("ord_us", "us"), "acme-secret").status_code == 200
    assert post(client, "acme/eu", acme_event("ord_far", "us"),
                "acme-eu-secret").status_code == 200
    assert jobs.process_batch(clean_db, acme_settings).done == 3
    assert sorted(seen) == [("ord_1", "eu", "eu"), ("ord_us", "acme", "us")]
    assert rows(clean_db, "SELECT event_id, outcome FROM jobs WHERE event_id = 'ord_far'") == [
        ("ord_far", "no effect: region us")]
    assert rows(clean_db, "SELECT count(*) FROM webhook_events") == [(3,)]


def test_a_providers_events_api_reconciles_each_missing_event_once(
        acme_settings: Settings, clean_db: Engine, fake_api: FakeAcme,
        seen: list[tuple[str, str, str]]) -> None:
    client = create_app(acme_settings).test_client()
    assert post(client, "acme/eu", acme_event("ord_2"), "acme-eu-secret").status_code == 200
    engine = db.create_engine(acme_settings, pool_size=2, autocommit=True)
    try:
        api = reconciliation.source_for(acme_settings, "acme", "eu")
        since = NOW - timedelta(hours=1)
        result = reconciliation.reconcile(engine, api, "acme", since, source_name="eu")
        again = reconciliation.reconcile(engine, api, "acme", since, source_name="eu")
    finally:
        engine.dispose()
    assert (result.listed, result.already, result.recorded) == (3, 1, 2)
    assert (again.listed, again.already, again.recorded) == (3, 3, 0)
    assert fake_api.requests == 4  # two pages, twice
    assert rows(clean_db, "SELECT event_id, source, received_via FROM webhook_events "
                "ORDER BY event_id") == [("ord_1", "eu", "reconcile"),
                                         ("ord_2", "eu", "delivery"),
                                         ("ord_3", "eu", "reconcile")]
    assert jobs.process_batch(clean_db, acme_settings).done == 3
    assert sorted(seen) == [("ord_1", "eu", "eu"), ("ord_2", "eu", "eu")]  # ord_3: us


def _listed(pages: Iterable[list[Listing]]) -> list[str]:
    return [listing.event_id for page in pages for listing in page]


def test_the_fake_events_api_is_read_by_the_records_own_client(fake_api: FakeAcme) -> None:
    """The client the record builds reads the fake's two pages (and is refused without
    the key, as the real API would be)."""
    source = Source("acme", "eu", ("s",), credentials=KEY_EU)
    assert _listed(ACME.events_api(source, fake_api.url).pages(NOW)) == [  # type: ignore[misc]
        "ord_1", "ord_2", "ord_3"]
    with pytest.raises(http.ApiError, match="401"):
        _listed(events_api(Source("acme", "eu", ("s",), credentials="wrong"),
                           fake_api.url).pages(NOW))
