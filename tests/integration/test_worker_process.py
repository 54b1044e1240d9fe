"""Real worker and clock processes (as the Procfile starts them), a real broker, kill -9."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests import factories, processes
from tests.conftest import STRIPE_SECRET
from webhooks.shared.settings import Settings


def env_for(settings: Settings, **extra: str) -> dict[str, str]:
    return {"DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
            "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET,
            "WEBHOOK_HANDLERS": "webhooks.ledger,tests.handlers_for_tests",
            "SWEEP_INTERVAL_SECONDS": "1", "JOB_RETRY_BASE_SECONDS": "0.2", **extra}


def scalar(engine: Engine, sql: str) -> object:
    with engine.connect() as conn:
        return conn.execute(sa.text(sql)).scalar()


def handler_sleeping(engine: Engine) -> bool:
    """tests/handlers_for_tests.py's slow_credit has written and holds its transaction open."""
    return bool(scalar(
        engine, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'"))


def test_worker_killed_mid_transaction_loses_nothing_and_applies_once(
    settings: Settings, clean_db: Engine, tmp_path: Path
) -> None:
    event = factories.stripe_event("test.slow_credit", {"customer": "cus_kill"})
    factories.insert_event_and_job(clean_db, event)  # no message: the clock must find it
    log = tmp_path / "processes.log"
    clock = processes.start(["clock"], env_for(settings), log)
    doomed = processes.start(["worker", "--processes", "1", "--threads", "1"],
                             env_for(settings, TEST_HANDLER_SLEEP="60"), log)
    try:
        # The handler's UPDATE is in, its transaction open and sleeping: kill -9 now.
        processes.wait_until(lambda: handler_sleeping(clean_db), timeout=60)
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait(10)
        processes.wait_until(lambda: not handler_sleeping(clean_db), timeout=30)
        assert scalar(clean_db, "SELECT status FROM jobs") == "pending"
        assert scalar(clean_db, "SELECT count(*) FROM accounts") == 0  # rolled back
        survivor = processes.start(["worker", "--processes", "1", "--threads", "2"],
                                   env_for(settings), log)
        try:
            processes.wait_until(lambda: scalar(clean_db, "SELECT status FROM jobs") == "done",
                                 timeout=60)
        finally:
            processes.stop(survivor)
    finally:
        processes.stop(clock)
        processes.stop(doomed, signal.SIGKILL)
    assert scalar(clean_db, "SELECT balance FROM accounts WHERE customer_id = 'cus_kill'") == 100
    assert scalar(clean_db, "SELECT attempts FROM jobs") == 1


RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def rabbitmq_running() -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", 5672)) == 0


@pytest.mark.parametrize("broker", ["configured", "rabbitmq"])
def test_end_to_end_through_web_worker_and_broker(
    settings: Settings, clean_db: Engine, tmp_path: Path, broker: str
) -> None:
    import json

    import requests

    if broker == "rabbitmq":
        if not rabbitmq_running():
            pytest.skip("no RabbitMQ on 127.0.0.1:5672")
        settings = Settings(**{**settings.__dict__, "broker_url": RABBITMQ_URL})
    log = tmp_path / "processes.log"
    worker = processes.start(["worker", "--processes", "1", "--threads", "2"],
                             env_for(settings, SWEEP_INTERVAL_SECONDS="600"), log)
    try:
        with processes.web_server(env_for(settings), log) as base:
            body = json.dumps(factories.stripe_event(
                "invoice.paid", factories.invoice("in_e2e", customer="cus_e2e", amount=700)
            )).encode()
            headers = {"Stripe-Signature": factories.stripe_signature(body, STRIPE_SECRET)}
            for _ in range(3):
                assert requests.post(f"{base}/webhooks/stripe", data=body, headers=headers,
                                     timeout=10).status_code == 200
            # No clock runs: only the broker message can have woken the worker.
            processes.wait_until(lambda: scalar(clean_db, "SELECT status FROM jobs") == "done",
                                 timeout=30)
    finally:
        processes.stop(worker)
    assert scalar(clean_db, "SELECT balance FROM accounts WHERE customer_id = 'cus_e2e'") == 700


def test_sigterm_to_the_whole_group_lets_the_batch_in_flight_finish(
    settings: Settings, clean_db: Engine, tmp_path: Path
) -> None:
    """As Heroku and systemd stop a worker: SIGTERM to every process of its group at once.
    Each worker process gets it twice (its own, and the copy Dramatiq's main process
    forwards, which on a busy machine arrives a little later: sent again here after 0.2 s);
    the job in flight still commits before the process exits, instead of rolling back."""
    event = factories.stripe_event("test.slow_credit", {"customer": "cus_term"})
    factories.insert_event_and_job(clean_db, event)
    log = tmp_path / "processes.log"
    clock = processes.start(["clock"], env_for(settings), log)
    worker = processes.start(["worker", "--processes", "1", "--threads", "1"],
                             env_for(settings, TEST_HANDLER_SLEEP="3"), log)
    try:
        processes.wait_until(lambda: handler_sleeping(clean_db), timeout=60)
        children = psutil.Process(worker.pid).children()
        os.killpg(worker.pid, signal.SIGTERM)
        time.sleep(0.2)
        for child in children:
            os.kill(child.pid, signal.SIGTERM)
        assert worker.wait(40) == 0
    finally:
        processes.stop(clock)
        processes.stop(worker, signal.SIGKILL)
    assert "Killing worker process" not in log.read_text(errors="replace")
    assert scalar(clean_db, "SELECT status FROM jobs") == "done"
    assert scalar(clean_db, "SELECT balance FROM accounts WHERE customer_id = 'cus_term'") == 100
