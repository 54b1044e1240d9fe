"""The `webhooks` command's contract: exit statuses, one-line errors, replay and prune."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy.engine import Engine

from tests import factories
from webhooks.cli import main
from webhooks.shared.settings import Settings


@pytest.fixture()
def run(settings: Settings):  # type: ignore[no-untyped-def]
    env = {"DATABASE_URL": settings.database_url, "BROKER_URL": settings.broker_url}

    def invoke(*args: str):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(main, list(args), env=env)

    return invoke


def job(engine: Engine, status: str, event_type: str = "invoice.paid",
        provider: str = "stripe") -> int:
    event = factories.stripe_event(event_type, factories.invoice())
    return factories.insert_event_and_job(engine, event, provider=provider, status=status,
                                          attempts=3)


def statuses(engine: Engine) -> dict[int, tuple[str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, status, attempts FROM jobs"))
        return {row.id: (row.status, row.attempts) for row in rows}


def test_replay_moves_failed_jobs_back_to_pending(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    failed = job(clean_db, "failed")
    result = run("replay", "--job", str(failed))
    assert result.exit_code == 0, result.output
    assert "replayed 1 job" in result.output
    assert statuses(clean_db)[failed] == ("pending", 0)


def test_replay_refuses_done_jobs_and_changes_nothing(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    failed, done = job(clean_db, "failed"), job(clean_db, "done")
    before = statuses(clean_db)
    result = run("replay", "--job", str(failed), "--job", str(done))
    assert result.exit_code == 1
    assert "refusing" in result.output and str(done) in result.output
    assert statuses(clean_db) == before


def test_replay_unknown_job_is_a_failure(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    assert run("replay", "--job", "999999").exit_code == 1


def test_replay_all_with_filters_and_dry_run(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    paid = [job(clean_db, "failed") for _ in range(3)]
    refund = job(clean_db, "failed", event_type="charge.refunded")
    done = job(clean_db, "done")
    dry = run("replay", "--all", "--type", "invoice.paid", "--dry-run")
    assert dry.exit_code == 0 and "would replay 3 job" in dry.output
    assert all(statuses(clean_db)[j][0] == "failed" for j in paid)
    real = run("replay", "--all", "--provider", "stripe", "--type", "invoice.paid",
               "--since", "2000-01-01")
    assert real.exit_code == 0 and "replayed 3 job" in real.output
    after = statuses(clean_db)
    assert all(after[j][0] == "pending" for j in paid)
    assert after[refund][0] == "failed" and after[done][0] == "done"


@pytest.mark.parametrize("args", [["replay"], ["replay", "--job", "1", "--all"],
                                  ["replay", "--job", "x"], ["nope"],
                                  ["replay", "--job", "1", "--provider", "stripe"]])
def test_bad_usage_exits_2(run, args) -> None:  # type: ignore[no-untyped-def]
    assert run(*args).exit_code == 2


@pytest.mark.parametrize(("variable", "value"), [
    ("JOB_MAX_ATTEMPTS", "-1"), ("DATABASE_URL", "mysql://x/y"), ("PORT", "eighty"),
    ("BROKER_URL", "kafka://x"), ("WEBHOOK_TOLERANCE_SECONDS", "-5"),
    ("STANDARD_WEBHOOK_SECRET", "not base64!"),
])
def test_bad_environment_stops_with_one_line_naming_the_variable(variable, value) -> None:  # type: ignore[no-untyped-def]
    result = subprocess.run([sys.executable, "-m", "webhooks", "stats"],
                            env={"PATH": "/usr/bin:/bin", variable: value},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and variable in lines[0]


def test_prune_and_stats(run, clean_db) -> None:  # type: ignore[no-untyped-def]
    old = job(clean_db, "done")
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET finished_at = now() - interval '40 days'"))
    keep = job(clean_db, "failed")
    result = run("prune", "--days", "30")
    assert result.exit_code == 0 and "pruned 1" in result.output
    assert set(statuses(clean_db)) == {keep} and old != keep
    stats = run("stats")
    assert stats.exit_code == 0
    assert "received" in stats.output and "duplicates" in stats.output
