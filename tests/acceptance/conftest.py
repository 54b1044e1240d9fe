"""One running system for the acceptance tier (harness.System), shared by its tests, and
one behind PgBouncer for the tests that also run through a pooler: each test starts from
healed servers and processes, empty tables and a fresh fake Postmark."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.acceptance.harness import System


@pytest.fixture(scope="session")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    running = System(tmp_path_factory.mktemp("acceptance"))
    try:
        yield running.start()
    finally:
        running.stop()


@pytest.fixture(scope="session")
def pooled_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """The same system with PgBouncer in transaction mode between the processes and
    Postgres (harness.System's `pooled`), for the tests that run through it too."""
    running = System(tmp_path_factory.mktemp("acceptance-pooled"), pooled=True)
    try:
        yield running.start()
    finally:
        running.stop()


@pytest.fixture()
def fresh(system: System, request: pytest.FixtureRequest) -> Iterator[System]:
    yield from _fresh(system, request)


@pytest.fixture()
def fresh_pooled(pooled_system: System, request: pytest.FixtureRequest) -> Iterator[System]:
    yield from _fresh(pooled_system, request)


def _fresh(system: System, request: pytest.FixtureRequest) -> Iterator[System]:
    system.heal()
    system.reset()
    yield system
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(system.logs(60))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def soak_requested(config: pytest.Config) -> bool:
    return bool(config.getoption("--soak", default=False)) or os.environ.get(
        "WEBHOOKS_SOAK", "") not in ("", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if soak_requested(config):
        return
    skip = pytest.mark.skip(reason="the long run: pytest --soak (or WEBHOOKS_SOAK=1)")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
