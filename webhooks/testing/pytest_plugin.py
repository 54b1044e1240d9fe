"""The test kit in a team's own pytest suite (entry point `pytest11`, the `testing` extra):

    def test_our_handlers_are_exactly_once(check_idempotent) -> None:
        check_idempotent(read_events(["tests/events/invoices.json"]),
                         ignore=["acme_paid_invoices.event_id"])

    def test_a_paid_invoice_is_recorded(deliver, drain, webhooks_database) -> None:
        deliver("stripe", invoice_paid_payload)
        drain()
        ...  # webhooks_database is an Engine on the migrated database

The apps are those `--webhooks-apps` (or the ini option `webhooks_apps`, or
WEBHOOK_HANDLERS) names; the database is one of the session's own, created on
DATABASE_URL's server (else on an embedded Postgres), migrated with the core's and the
apps' migrations, emptied before each test that asks for it, dropped at the end.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pytest

APPS_OPTION = "webhooks_apps"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--webhooks-apps", dest=APPS_OPTION, default=None,
                     help="the apps the webhooks test kit runs (comma-separated modules; "
                          "default: WEBHOOK_HANDLERS)")
    parser.addini(APPS_OPTION, "the apps the webhooks test kit runs", type="linelist")


def _apps(config: pytest.Config) -> list[str]:
    given = config.getoption(APPS_OPTION) or ",".join(config.getini(APPS_OPTION)) \
        or os.environ.get("WEBHOOK_HANDLERS", "")
    apps = [name.strip() for name in given.split(",") if name.strip()]
    if not apps:
        raise pytest.UsageError("the webhooks test kit needs the apps to run: "
                                "--webhooks-apps, the ini option webhooks_apps, or "
                                "WEBHOOK_HANDLERS")
    return apps


@pytest.fixture(scope="session")
def webhooks_kit(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The system on a migrated database of the session's own, the apps running."""
    from webhooks import testing

    with testing.database(os.environ.get("DATABASE_URL")) as url, \
            testing.Kit(url, _apps(request.config)) as kit:
        yield kit


@pytest.fixture()
def webhooks_database(webhooks_kit: Any) -> Any:
    """An Engine on the kit's database, every table emptied first."""
    webhooks_kit.reset()
    return webhooks_kit.engine


@pytest.fixture()
def deliver(webhooks_database: Any, webhooks_kit: Any) -> Callable[..., dict[str, Any]]:
    """deliver(provider, payload, event_id=None, event_type=None): the payload signed and
    delivered through the ingest's own verification and recording; its answer."""
    from webhooks.testing import event

    def deliver(provider: str, payload: Mapping[str, Any], *, event_id: str | None = None,
                event_type: str | None = None) -> dict[str, Any]:
        return dict(webhooks_kit.deliver(event(payload, provider, event_id=event_id,
                                               event_type=event_type)))

    return deliver


@pytest.fixture()
def drain(webhooks_database: Any, webhooks_kit: Any) -> Callable[[], None]:
    """drain(): the jobs due applied through the worker's own batches, until none is due."""
    return webhooks_kit.drain  # type: ignore[no-any-return]


@pytest.fixture()
def check_idempotent(webhooks_kit: Any) -> Callable[..., Any]:
    """check_idempotent(events, ignore=(), schedules=50, seed=None): the events applied
    once each, in order, then under the schedules (docs/testing-your-app.md); fails the
    test with the kit's report (the shortest schedule, its seed, the rows that differ)."""
    from webhooks import testing

    def check(events: Sequence[Any], *, ignore: Iterable[str] = (), schedules: int = 50,
              seed: int | None = None) -> Any:
        given = [item if isinstance(item, testing.Event) else testing.event(item)
                 for item in events]
        kit = webhooks_kit
        if ignore:
            kit.ignore(ignore)
        try:
            result = testing.check(kit, given, schedules_count=schedules, seed=seed)
        finally:
            kit.ignore(())
        if not result.ok:
            pytest.fail(result.report(), pytrace=False)
        return result

    return check
