"""Apps (SPEC "Apps"): the reference app runs only where it is named; several apps may
handle one event type, each in the job's transaction, in the order they are named, the
outcome naming each; two lock keys for one provider stop every process with one line
naming both; a process with no app, or with the reference app's rows and not the app,
says so in one WARNING at start."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.apps import alpha
from tests.conftest import STRIPE_SECRET
from webhooks.shared import handlers, hooks
from webhooks.shared.errors import AppConflict
from webhooks.shared.settings import Settings
from webhooks.worker import jobs

ALPHA, BETA, LEDGER = "tests.apps.alpha", "tests.apps.beta", "webhooks.ledger"


def _rows(engine: Engine, sql: str) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(sql))]


def test_a_teams_invoice_paid_handler_runs_beside_the_reference_app(
        clean_db: Engine, settings: Settings) -> None:
    """The handler the reference app also has (invoice.paid): both run, in the order named,
    in the job's one transaction; the outcome names each."""
    hooks.load((LEDGER, ALPHA))
    alpha.SEEN.clear()
    factories.insert_event_and_job(clean_db, factories.stripe_event(
        "invoice.paid", factories.invoice("in_both", amount=700), event_id="evt_both"))
    assert jobs.process_batch(clean_db, settings).done == 1
    assert alpha.SEEN == [("alpha", "evt_both")]
    assert _rows(clean_db, "SELECT outcome FROM jobs") == [
        ("webhooks.ledger: credited; tests.apps.alpha: alpha noted",)]
    assert _rows(clean_db, "SELECT amount FROM ledger_entries") == [(700,)]


def test_without_the_reference_app_its_events_have_no_effect(
        clean_db: Engine, settings: Settings) -> None:
    """Named alone, a team's app handles invoice.paid: no ledger entry, no receipt, and the
    reference app's audit checks do not run (they would report the invoice uncredited)."""
    hooks.load((ALPHA,))
    factories.insert_event_and_job(clean_db, factories.stripe_event(
        "invoice.paid", factories.invoice("in_theirs"), event_id="evt_theirs"))
    assert jobs.process_batch(clean_db, settings).done == 1
    assert _rows(clean_db, "SELECT outcome FROM jobs") == [("alpha noted",)]
    assert _rows(clean_db, "SELECT count(*) FROM ledger_entries") == [(0,)]
    assert _rows(clean_db, "SELECT count(*) FROM outbox") == [(0,)]
    assert [name for _, name in hooks.audit_checks()] == []
    hooks.load(())
    assert handlers.for_event("stripe", "invoice.paid") == []


def test_two_apps_handle_one_type_in_the_order_named_and_a_star_only_where_none_does(
        clean_db: Engine, settings: Settings) -> None:
    hooks.load((BETA, ALPHA))
    assert [app for app, _ in handlers.for_event("stripe", "test.two_apps")] == [BETA, ALPHA]
    assert [app for app, _ in handlers.for_event("stripe", "invoice.paid")] == [BETA, ALPHA]
    alpha.SEEN.clear()
    factories.insert_event_and_job(clean_db, {"id": "evt_two", "type": "test.two_apps"})
    assert jobs.process_batch(clean_db, settings).done == 1
    assert alpha.SEEN == [("beta", "evt_two"), ("alpha", "evt_two")]
    assert _rows(clean_db, "SELECT outcome FROM jobs") == [
        ("tests.apps.beta: beta noted; tests.apps.alpha: alpha noted",)]


def test_two_lock_keys_for_one_provider_are_refused_naming_both() -> None:
    with pytest.raises(AppConflict, match=r"webhooks\.ledger and tests\.apps\.locking"):
        hooks.load((LEDGER, "tests.apps.locking"))


def _env(settings: Settings, apps: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": settings.database_url or "",
            "BROKER_URL": settings.broker_url or "", "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
            "WEBHOOK_HANDLERS": apps, "WORKER_METRICS_PORT": "0",
            "PORT": str(processes.free_port()), "CONSOLE_PORT": str(processes.free_port()),
            "CONSOLE_PASSWORD": "a-console-password-1"}


def _start(settings: Settings, apps: str) -> subprocess.CompletedProcess[str]:
    """What a Procfile process does at start, up to serving (webhooks.cli.process_settings)."""
    code = "from webhooks import cli; cli.process_settings(); print('started')"
    return subprocess.run([sys.executable, "-c", code], env=_env(settings, apps),
                          cwd=processes.ROOT, capture_output=True, text=True, timeout=60)


def test_every_process_exits_1_naming_both_lock_keys(settings: Settings) -> None:
    for command in ("worker", "web", "clock", "console"):
        result = subprocess.run([sys.executable, "-m", "webhooks", command],
                                env=_env(settings, f"{LEDGER},tests.apps.locking"),
                                cwd=processes.ROOT, capture_output=True, text=True, timeout=60)
        assert result.returncode == 1, (command, result.stderr)
        assert result.stderr.strip().splitlines()[-1:] == [
            "webhooks: WEBHOOK_HANDLERS: two apps register a lock key for stripe: "
            "webhooks.ledger and tests.apps.locking (a provider has at most one)"], command


def test_a_handler_module_that_fails_to_import_is_one_line(settings: Settings) -> None:
    result = _start(settings, "tests.apps.broken")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("webhooks: WEBHOOK_HANDLERS: tests.apps.broken: ZeroDivisionError")


def test_no_app_is_one_warning_at_start(clean_db: Engine, settings: Settings) -> None:
    result = _start(settings, "")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "no app runs (WEBHOOK_HANDLERS names none)" in warnings[0]


def test_the_reference_apps_rows_without_the_app_are_one_warning_at_start(
        clean_db: Engine, settings: Settings) -> None:
    factories.insert_event_and_job(clean_db, factories.stripe_event(
        "invoice.paid", factories.invoice("in_old", amount=500), event_id="evt_old"))
    assert jobs.process_batch(clean_db, settings).done == 1  # the test apps: the ledger
    named = _start(settings, LEDGER)
    assert "WARNING" not in named.stderr, named.stderr
    result = _start(settings, ALPHA)
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "does not name webhooks.ledger" in warnings[0], warnings
    assert json.dumps(warnings)  # one line each


def test_an_app_is_found_by_the_import_system_from_any_folder(tmp_path: object) -> None:
    """An installed or editable distribution's module is found from outside the checkout
    (the editable install's own finder): WEBHOOK_HANDLERS=webhooks.ledger is valid there."""
    code = ("from webhooks.shared.settings import Settings; "
            "print(Settings.from_env({'WEBHOOK_HANDLERS': 'webhooks.ledger'}).handler_modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path),
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout.strip()) == (0, "('webhooks.ledger',)"), \
        result.stderr
