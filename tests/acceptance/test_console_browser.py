"""The operator console in a real headless Chromium (Debian's, driven by Playwright),
against the real `console` process, a real worker and a private Redis: an operator finds a
failed event by a word of its payload, reads why it failed, fixes the cause, replays it
and sees one credit; replays all of a filtered list; filters by source; pauses one source
and resumes it; a POST without the CSRF token changes nothing; a read-only console has
nothing to press.

With CONSOLE_SCREENSHOTS=<folder> it also saves the screenshots of docs/console.md there."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.console_helpers import PASSWORD, USER, email, failed_event, job
from webhooks.shared import wakeups
from webhooks.shared.settings import Settings

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="needs Debian's chromium at /usr/bin/chromium "
                                       "(apt-get install chromium)")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    redis = processes.PrivateRedis(tmp_path_factory.mktemp("redis"))
    redis.start()
    yield redis.url
    redis.stop()


@pytest.fixture(scope="module")
def flag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("flag") / "ledger-open"


@pytest.fixture(scope="module")
def env(database_url: str, redis_url: str, flag: Path) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "BROKER_URL": redis_url, "CONSOLE_USER": USER,
            "CONSOLE_PASSWORD": PASSWORD,
            "WEBHOOK_HANDLERS": "webhooks.ledger,tests.acceptance.console_handlers",
            # The sources the overview lists from the start (a Connect endpoint among them).
            "STRIPE_WEBHOOK_SECRET": "whsec_console_platform", "STRIPE_SOURCES": "connect",
            "STRIPE_CONNECT_WEBHOOK_SECRET": "whsec_console_connect", "STRIPE_CONNECT_CONNECT": "1",
            "CONSOLE_TEST_FLAG": str(flag), "JOB_MAX_ATTEMPTS": "1",
            "JOB_RETRY_BASE_SECONDS": "0", "WORKER_METRICS_PORT": "0", "PYTHONPATH": str(ROOT)}


def start_console(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = processes.free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "webhooks", "console", "--host", "127.0.0.1"], cwd=ROOT,
        env={**os.environ, **env, "CONSOLE_PORT": str(port)},
        stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    processes.wait_http(f"{base}/", timeout=30)
    return process, base


@pytest.fixture(scope="module")
def console(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process, base = start_console(env, tmp_path_factory.mktemp("logs") / "console.log")
    yield base
    processes.stop(process)


@pytest.fixture(scope="module")
def readonly_console(env: dict[str, str],
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process, base = start_console({**env, "CONSOLE_READONLY": "1"},
                                  tmp_path_factory.mktemp("logs") / "console-ro.log")
    yield base
    processes.stop(process)


@pytest.fixture(scope="module")
def worker(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    process = processes.start(["worker", "--processes", "1", "--threads", "2"], env,
                              tmp_path_factory.mktemp("logs") / "worker.log")
    yield
    processes.stop(process)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(http_credentials={"username": USER, "password": PASSWORD},
                                  viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


def wake(database_url: str, redis_url: str, job_ids: list[int]) -> None:
    settings = Settings.from_env({"DATABASE_URL": database_url, "BROKER_URL": redis_url})
    broker = wakeups.create_broker(settings)
    assert wakeups.wake_jobs(broker, job_ids)
    broker.close()


def status_of(engine: Engine, job_id: int) -> str:
    return str(job(engine, job_id).status)


def invoice_event(event_type: str, **invoice: Any) -> dict[str, Any]:
    return factories.stripe_event(event_type, factories.invoice(**invoice))


def test_find_a_failed_event_by_its_payload_fix_replay_and_see_one_credit(
        page: Any, console: str, worker: None, engine: Engine, database_url: str,
        redis_url: str, flag: Path) -> None:
    unique = secrets.token_hex(4)
    customer_email = f"grace.hopper.{unique}@example.org"
    event = invoice_event("test.console_credit", invoice_id=f"in_cobol{unique}",
                          customer=f"cus_{unique}", amount=4200, email=customer_email)
    job_id = factories.insert_event_and_job(engine, event)
    wake(database_url, redis_url, [job_id])
    processes.wait_until(lambda: status_of(engine, job_id) == "failed", timeout=30)

    page.goto(f"{console}/events")
    page.get_by_label("Search").fill(customer_email)
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("tbody tr")
    assert rows.count() == 1
    rows.first.get_by_role("link", name=event["id"]).click()
    assert "ledger closed for maintenance" in page.locator("#last-error").inner_text()
    assert page.locator("#job-status").inner_text() == "failed"

    flag.touch()  # the operator fixes the cause
    page.get_by_role("button", name="Replay").click()
    assert "Replayed 1 job(s)" in page.locator("[role=status]").inner_text()

    def done() -> bool:
        page.reload()
        return bool(page.locator("#job-status").inner_text() == "done")

    processes.wait_until(done, timeout=30, interval=0.5)
    entries = page.locator("tr.ledger-entry")
    assert entries.count() == 1
    assert "4200" in entries.first.inner_text()
    assert page.get_by_role("button", name="Replay").count() == 0
    with engine.connect() as conn:
        credits = conn.execute(sa.text("SELECT amount FROM ledger_entries WHERE event_id = :e"),
                               {"e": event["id"]}).scalars().all()
    assert credits == [4200]


def test_replay_all_on_a_filtered_list_moves_exactly_the_matching_jobs(
        page: Any, console: str, worker: None, engine: Engine) -> None:
    batch_type = f"test.console_batch_{secrets.token_hex(3)}"  # no handler: done, no effect
    matching = [failed_event(engine, invoice_event(batch_type)) for _ in range(3)]
    others = [failed_event(engine, invoice_event(f"{batch_type}_other")) for _ in range(2)]

    page.goto(f"{console}/events?status=failed&type={batch_type}")
    assert page.locator("tbody tr").count() == 3
    page.get_by_role("link", name="Replay all").click()
    assert page.locator("#replay-count").inner_text() == "3"
    assert [status_of(engine, j) for j in matching] == ["failed"] * 3  # asking moved none
    page.get_by_role("button", name="Replay 3 job(s)").click()
    assert "Replayed 3 job(s)" in page.locator("[role=status]").inner_text()
    processes.wait_until(lambda: all(status_of(engine, j) == "done" for j in matching),
                         timeout=30)
    assert [status_of(engine, j) for j in others] == ["failed", "failed"]


def test_a_post_without_the_csrf_token_changes_nothing(page: Any, console: str,
                                                       engine: Engine) -> None:
    event = invoice_event("test.console_stuck")
    job_id = failed_event(engine, event, error="RuntimeError: stays failed")
    for form in ({}, {"csrf_token": "forged.token.value"}):
        answer = page.request.post(f"{console}/jobs/{job_id}/replay", form=form)
        assert answer.status in (400, 403)
    # The real form, its token removed in the page before pressing the button.
    page.goto(f"{console}/events/stripe/{event['id']}")
    page.locator("input[name=csrf_token]").evaluate("input => input.remove()")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_role("button", name="Replay").click()
    assert posted.value.status == 403
    assert "CSRF" in page.content()
    assert status_of(engine, job_id) == "failed"


def test_a_read_only_console_has_nothing_to_press(page: Any, console: str,
                                                  readonly_console: str,
                                                  engine: Engine) -> None:
    event = invoice_event("test.console_readonly")
    job_id = failed_event(engine, event, error="RuntimeError: look, don't touch")
    email(engine, f"receipt:ro{secrets.token_hex(3)}", "failed", event=("stripe", event["id"]))
    page.goto(f"{console}/events/stripe/{event['id']}")
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    for path in (f"/events/stripe/{event['id']}", "/events?status=failed",
                 "/emails?status=failed", "/"):
        page.goto(readonly_console + path)
        assert page.locator("form[method=post]").count() == 0, path
        for name in ("Replay", "Replay all", "Retry"):
            assert page.get_by_role("button", name=name).count() == 0, path
    page.goto(f"{readonly_console}/events/stripe/{event['id']}")
    assert "look, don't touch" in page.locator("#last-error").inner_text()
    answer = page.request.post(f"{readonly_console}/jobs/{job_id}/replay",
                               form={"csrf_token": token})
    assert answer.status == 403
    assert status_of(engine, job_id) == "failed"


def test_filter_by_source_and_read_an_events_source_account_and_mode(
        page: Any, console: str, engine: Engine) -> None:
    kind = f"test.console_source_{secrets.token_hex(3)}"
    platform, connected = invoice_event(kind), invoice_event(kind)
    factories.insert_event_and_job(engine, platform)
    factories.insert_event_and_job(engine, connected, source="connect")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE webhook_events SET account = 'acct_console', "
                             "livemode = true WHERE event_id = :e"), {"e": connected["id"]})

    page.goto(f"{console}/events?type={kind}")
    assert page.locator("tbody tr").count() == 2
    page.get_by_label("Source").fill("stripe/connect")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("tbody tr")
    assert rows.count() == 1
    assert rows.first.locator("td.source").inner_text() == "stripe/connect acct_console"
    page.get_by_label("Source").fill("stripe")  # the default source
    page.get_by_role("button", name="Filter").click()
    assert page.locator("tbody tr").count() == 1
    assert page.locator("tbody td.source").inner_text() == "stripe"
    page.goto(f"{console}/events?type={kind}&source=stripe/connect")
    page.get_by_role("link", name=connected["id"]).click()
    assert page.locator("#event-source").inner_text() == "stripe/connect"
    assert page.locator("#event-account").inner_text() == "acct_console"
    assert page.locator("#event-livemode").inner_text() == "live"
    page.goto(f"{console}/")
    assert page.get_by_role("link", name="stripe/connect", exact=True).count() == 1


def test_pause_one_source_from_the_overview_while_the_others_run_then_resume(
        page: Any, console: str, worker: None, engine: Engine, database_url: str,
        redis_url: str) -> None:
    kind = f"test.console_pause_{secrets.token_hex(3)}"  # no handler: done, no effect
    page.goto(f"{console}/")  # stripe/connect is configured: listed, with its button
    page.get_by_role("button", name="Pause stripe/connect").click()
    assert "Paused" in page.locator("[role=status]").inner_text()
    held = factories.insert_event_and_job(engine, invoice_event(kind), source="connect")
    runs = factories.insert_event_and_job(engine, invoice_event(kind))
    wake(database_url, redis_url, [held, runs])
    processes.wait_until(lambda: status_of(engine, runs) == "done", timeout=30)
    assert status_of(engine, held) == "pending"  # claimed with it, had it been due
    page.get_by_role("button", name="Resume stripe/connect").click()
    # Due now: this one, and any connect job an earlier test of the module left pending.
    assert "Resumed:" in page.locator("[role=status]").inner_text()
    processes.wait_until(lambda: status_of(engine, held) == "done", timeout=30)


def test_screenshots_of_the_overview_and_a_failed_event(
        page: Any, console: str, clean_db: Engine, tmp_path: Path) -> None:
    folder = Path(os.environ.get("CONSOLE_SCREENSHOTS") or tmp_path)
    failed_id = _seed_a_day_of_traffic(clean_db)
    page.set_viewport_size({"width": 1200, "height": 760})
    page.goto(f"{console}/")
    page.screenshot(path=str(folder / "console-overview.png"), full_page=True)
    page.goto(f"{console}/events/stripe/{failed_id}")
    page.screenshot(path=str(folder / "console-failed-event.png"), full_page=True)
    for name in ("console-overview.png", "console-failed-event.png"):
        assert (folder / name).stat().st_size > 10_000


def _seed_a_day_of_traffic(engine: Engine) -> str:
    """A plausible day: deliveries every hour, a few duplicates, one failed invoice."""
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    for hour in range(24):
        count = 6 + (hour * 7) % 11 + (12 if 9 <= (now - timedelta(hours=hour)).hour <= 17
                                        else 0)
        for n in range(count):
            provider = ("stripe", "stripe", "stripe", "github", "paddle")[n % 5]
            kind = {"stripe": "invoice.paid", "github": "push",
                    "paddle": "transaction.completed"}[provider]
            rows.append({"p": provider, "e": f"evt_{hour:02}{n:02}{secrets.token_hex(6)}",
                         "t": kind, "at": now - timedelta(hours=hour, minutes=n),
                         "payload": json.dumps({"type": kind}), "status": "done"})
    rows[5]["status"] = "pending"
    failed = invoice_event("invoice.paid", invoice_id="in_1QfT7x2eZvKYlo2C",
                           customer="cus_NffrFeUfNV2Hib", amount=2500,
                           email="ada@lovelace.example")
    del failed["data"]["object"]["amount_paid"]
    failed["id"] = "evt_1QfT8d2eZvKYlo2CuV0Zb3xk"
    with engine.begin() as conn:
        conn.execute(sa.text("""
            INSERT INTO webhook_events (provider, source, event_id, event_type, payload,
                                        received_at)
            VALUES (:p, :p, :e, :t, CAST(:payload AS jsonb), :at)"""), rows)
        conn.execute(sa.text("""
            INSERT INTO jobs (provider, source, event_id, event_type, status, attempts,
                              created_at, run_at, finished_at)
            VALUES (:p, :p, :e, :t, :status, 1, :at, :at,
                    CASE WHEN :status = 'done' THEN :at END)"""), rows)
        conn.execute(sa.text("INSERT INTO webhook_duplicates (provider, source, event_id, "
                             "event_source) SELECT provider, source, event_id, source "
                             "FROM webhook_events "
                             "ORDER BY id LIMIT 9"))
    failed_event(engine, failed, error="PermanentJobError: invoice in_1QfT7x2eZvKYlo2C has "
                                       "no amount_paid")
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE jobs SET attempts = 8 WHERE event_id = :e"),
                     {"e": failed["id"]})
    return str(failed["id"])
