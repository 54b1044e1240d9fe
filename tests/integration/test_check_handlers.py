"""The test kit finds what it is for (webhooks/testing, `webhooks check-handlers`): each
deliberately wrong app of tests/apps/kit is failed, naming what it did, and each fix, the
reference app and the example app pass; a failing schedule is drawn again by its seed; the
command and the pytest plugin run the same check from outside."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apps.kit import INVOICES, PAIRS, SUBSCRIPTIONS
from tests.conftest import server_url
from webhooks import testing
from webhooks.testing.schedules import Drain

ROOT = Path(__file__).resolve().parents[2]
STRIPE_EXAMPLES = [ROOT / "examples" / "stripe" / f"{name}.json" for name in (
    "invoice_paid", "invoice_payment_succeeded", "subscription_created", "subscription_updated",
    "subscription_deleted", "charge_refunded_partial")]
SCHEDULES = 30
SEED = 20261206


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    with testing.database(server_url()) as url:
        yield url


def check(url: str, app: str, events: list[Path], *, ignore: tuple[str, ...] = (),
          seed: int = SEED) -> testing.Result:
    with testing.Kit(url, [app], ignore=ignore) as kit:
        kit.reset()
        return testing.check(kit, testing.read_events(events), schedules_count=SCHEDULES,
                             seed=seed)


def test_a_check_then_insert_is_failed_under_two_batches_at_once(database: str) -> None:
    result = check(database, "tests.apps.kit.check_then_insert", [INVOICES])
    assert not result.ok and result.schedule is not None and result.failure is not None
    assert Drain.TWO_AT_ONCE in {copy.then for copy in result.schedule.copies} | {
        result.schedule.last}
    [(table, (theirs, reference))] = result.failure.differences.items()
    assert table == "kit_cti_credits" and reference == [] and theirs  # a second credit row
    report = result.report()
    assert f"--seed {SEED}" in report and "two batches at once" in report


def test_an_increment_keyed_by_nothing_is_failed_by_the_apps_audit_check(database: str) -> None:
    """Every schedule double-credits alike, the reference too: only the app's invariant
    ("one credit per invoice") can tell."""
    result = check(database, "tests.apps.kit.unkeyed_increment", [INVOICES])
    assert not result.ok and result.failure is not None and result.schedule is None
    assert result.failure.violations and all(
        line.startswith("one_credit_per_invoice:") for line in result.failure.violations)
    assert "audit: one_credit_per_invoice" in result.report()


def test_a_status_written_without_the_created_guard_is_failed_out_of_order(
        database: str) -> None:
    result = check(database, "tests.apps.kit.subscription_status", [SUBSCRIPTIONS])
    assert not result.ok and result.schedule is not None and result.failure is not None
    [(table, (theirs, reference))] = result.failure.differences.items()
    assert table == "kit_ss_subscriptions" and len(theirs) == len(reference) >= 1
    assert {row[0] for row in theirs} == {row[0] for row in reference}  # a status differs


def test_a_handler_that_sends_by_http_is_failed_naming_it(database: str) -> None:
    result = check(database, "tests.apps.kit.http_receipt", [INVOICES])
    assert not result.ok and result.failure is not None
    assert {reached.handlers for reached in result.failure.reached} == {
        ("tests.apps.kit.http_receipt.send_receipt",)}
    assert {reached.address for reached in result.failure.reached} == {"127.0.0.1:9"}
    assert "opened a network connection to 127.0.0.1:9" in result.report()


def test_state_kept_in_a_module_global_is_failed(database: str) -> None:
    result = check(database, "tests.apps.kit.module_global", [INVOICES])
    assert not result.ok and result.again and result.failure is not None
    assert "keep state between jobs" in result.report()
    [(table, (theirs, reference))] = result.failure.differences.items()
    assert table == "kit_mg_credits" and theirs == [] and len(reference) == 6


@pytest.mark.parametrize("fixed, events", [(fixed, events) for _, fixed, events in PAIRS],
                         ids=[fixed.rpartition(".")[2] for _, fixed, _ in PAIRS])
def test_each_fix_passes(database: str, fixed: str, events: Path) -> None:
    result = check(database, fixed, [events])
    assert result.ok, result.report()
    assert result.report().startswith(f"ok: {len(testing.read_events([events]))} events under "
                                      f"{SCHEDULES} schedules")


def test_the_reference_app_passes_with_the_column_that_says_which_event_came_first_ignored(
        database: str) -> None:
    result = check(database, "webhooks.ledger", STRIPE_EXAMPLES,
                   ignore=("ledger_entries.event_id",))
    assert result.ok, result.report()
    # Without it, a schedule whose invoice.payment_succeeded comes first differs there.
    unignored = check(database, "webhooks.ledger", STRIPE_EXAMPLES)
    assert not unignored.ok and unignored.failure is not None
    assert set(unignored.failure.differences) == {"ledger_entries"}


def test_the_example_app_passes(database: str) -> None:
    result = check(database, "examples.acme_billing", [INVOICES],
                   ignore=("acme_paid_invoices.event_id",))
    assert result.ok, result.report()


def test_a_failing_schedule_is_drawn_again_by_its_seed(database: str) -> None:
    first = check(database, "tests.apps.kit.subscription_status", [SUBSCRIPTIONS], seed=7)
    again = check(database, "tests.apps.kit.subscription_status", [SUBSCRIPTIONS], seed=7)
    assert first.schedule is not None and again.schedule is not None
    events = testing.read_events([SUBSCRIPTIONS])
    assert first.schedule.lines(events) == again.schedule.lines(events)
    assert first.report() == again.report()


def _command(app: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": server_url(), "WEBHOOK_HANDLERS": app,
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "webhooks", "check-handlers", *args],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)


def test_the_command_exits_1_with_the_schedule_and_0_for_the_fix() -> None:
    wrong = _command("tests.apps.kit.check_then_insert", str(INVOICES), "--schedules",
                     str(SCHEDULES), "--seed", str(SEED))
    assert wrong.returncode == 1, wrong.stderr
    assert "FAILED under this schedule" in wrong.stdout and f"--seed {SEED}" in wrong.stdout
    assert "kit_cti_credits" in wrong.stdout
    fixed = _command("tests.apps.kit.check_then_insert_fixed", str(INVOICES), "--schedules",
                     "10")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert fixed.stdout.startswith("ok: 12 events under 10 schedules")
    unreadable = _command("tests.apps.kit.check_then_insert_fixed", str(ROOT / "README.md"))
    assert unreadable.returncode == 2 and "README.md" in unreadable.stderr


def test_the_pytest_plugin_runs_the_check_in_a_teams_suite(tmp_path: Path) -> None:
    (tmp_path / "test_team.py").write_text(textwrap.dedent(f"""
        import json
        from webhooks.testing import read_events

        def test_handlers_are_exactly_once(check_idempotent):
            check_idempotent(read_events([{str(INVOICES)!r}]), schedules=5, seed=1)

        def test_a_paid_invoice_is_recorded_once(deliver, drain, webhooks_database):
            payload = json.load(open({str(INVOICES)!r}))[0]
            assert deliver("stripe", payload)["duplicate"] is False
            assert deliver("stripe", payload)["duplicate"] is True
            drain()
            with webhooks_database.connect() as conn:
                rows = conn.exec_driver_sql("SELECT invoice_id FROM kit_ctif_credits").all()
            assert rows == [(payload["data"]["object"]["id"],)]
    """))
    env = {**os.environ, "DATABASE_URL": server_url(), "PYTHONPATH": str(ROOT)}
    passed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path),
         "--rootdir", str(tmp_path), "--webhooks-apps", "tests.apps.kit.check_then_insert_fixed"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "2 passed" in passed.stdout
    failed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path),
         "--rootdir", str(tmp_path), "--webhooks-apps", "tests.apps.kit.unkeyed_increment",
         "-k", "exactly_once"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "audit: one_credit_per_invoice" in failed.stdout
