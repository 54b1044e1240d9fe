"""Calls to other APIs (SPEC "Calls to other APIs"): queued in the job's transaction once
per key, made by worker/calls.py with the key as the target's idempotency key, retried
with that key through lost answers and 5xx within the key's lifetime, ambiguous past it
(never sent again, until an operator settles it), failed on the target's refusal. A
`CALL_<N>_URL` target here: a receiver that keeps keys as the IETF draft describes (the
first request's effect and answer, replayed to a retry with the key)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy.engine import Engine

from tests import factories
from webhooks.cli import main
from webhooks.shared import calls, handlers
from webhooks.shared.call_targets import Target
from webhooks.shared.settings import Settings
from webhooks.worker import calls as dispatcher
from webhooks.worker import dispatch, jobs


class Receiver(ThreadingHTTPServer):
    """An API that keeps idempotency keys: one effect per key, its answer replayed."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.effects: dict[str, list[dict[str, Any]]] = {}
        self.answers: dict[str, tuple[int, bytes]] = {}
        self.requests: list[tuple[str, str | None, str | None]] = []
        self.drop_next = 0  # make the effect, then close without answering
        self.fail_next = 0  # 503 before anything is done (not kept for the key)
        self.refuse_next = 0  # 422: the request is invalid
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("Idempotency-Key")
        state = self.server
        with state.lock:
            state.requests.append((self.path, key, self.headers.get("Authorization")))
            if state.fail_next:
                state.fail_next -= 1
                return self._answer(503, b'{"error": "unavailable"}')
            if state.refuse_next:
                state.refuse_next -= 1
                return self._answer(422, b'{"error": "invalid contact"}')
            if key in state.answers:
                return self._answer(*state.answers[key])
            made = {"id": f"crm_{len(state.effects) + 1}", **body}
            state.effects.setdefault(key or "", []).append(made)
            state.answers[key or ""] = (201, json.dumps(made).encode())
            if state.drop_next:
                state.drop_next -= 1
                self.close_connection = True
                return None
            return self._answer(*state.answers[key or ""])

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture()
def crm(settings: Settings, receiver: Receiver) -> Settings:
    return dataclasses.replace(settings, call_targets={
        **settings.call_targets, "crm": Target("crm", receiver.url, "Bearer crm-token")})


@pytest.fixture()
def queued_calls() -> Iterator[list[bool]]:
    """A handler of `test.calls.contact` that queues one call per event, keyed by its
    contact (two events of one contact: one call), and notes each queue_call's answer."""
    answers: list[bool] = []

    @handlers.handler("stripe", "test.calls.contact")
    def upsert_contact(ctx: handlers.JobContext) -> str:
        contact = ctx.payload["data"]["object"]
        answers.append(ctx.queue_call(key=f"contact:{contact['id']}", target="crm",
                                      method="POST", path="/contacts",
                                      params={"email": contact["email"]}))
        return "queued"

    yield answers
    handlers._registry.pop(("stripe", "test.calls.contact"))


def contact_event(contact: str, event_id: str) -> dict[str, Any]:
    return factories.stripe_event("test.calls.contact", {
        "id": contact, "object": "customer", "email": f"{contact}@example.com"},
        event_id=event_id)


def rows(engine: Engine, statement: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(statement))]


def apply(engine: Engine, settings: Settings, *events: dict[str, Any]) -> None:
    for event in events:
        factories.insert_event_and_job(engine, event)
    assert jobs.process_batch(engine, settings).done == len(events)


def test_a_call_is_queued_once_per_key_and_made_once_with_it(
        clean_db: Engine, crm: Settings, receiver: Receiver, queued_calls: list[bool]) -> None:
    apply(clean_db, crm, contact_event("cus_a", "evt_c1"), contact_event("cus_a", "evt_c2"))
    assert queued_calls == [True, False]
    assert dispatcher.dispatch_due(clean_db, crm).sent == 1
    assert receiver.requests == [("/contacts", "contact:cus_a", "Bearer crm-token")]
    assert rows(clean_db, "SELECT key, status, attempts, response_status, "
                "response->>'id' FROM calls") == [("contact:cus_a", "sent", 1, 201, "crm_1")]
    with clean_db.begin() as conn:
        assert calls.result(conn, "contact:cus_a") == {
            "status": 201, "body": {"id": "crm_1", "email": "cus_a@example.com"}}
    assert dispatcher.dispatch_due(clean_db, crm).claimed == 0


def test_a_lost_answer_and_a_503_are_retried_with_the_key_one_effect(
        clean_db: Engine, crm: Settings, receiver: Receiver, queued_calls: list[bool]) -> None:
    apply(clean_db, crm, contact_event("cus_b", "evt_c3"))
    receiver.drop_next, receiver.fail_next = 1, 0
    first = dispatcher.dispatch_due(clean_db, crm)
    assert (first.sent, first.retried) == (0, 1)  # made, but the answer was lost
    receiver.fail_next = 1
    assert dispatcher.dispatch_due(clean_db, crm).retried == 1  # a 503: retried again
    assert dispatcher.dispatch_due(clean_db, crm).sent == 1  # the first answer, replayed
    assert [key for _, key, _ in receiver.requests] == ["contact:cus_b"] * 3
    assert {key: len(made) for key, made in receiver.effects.items()} == {"contact:cus_b": 1}
    assert rows(clean_db, "SELECT status, attempts, response->>'id' FROM calls") == [
        ("sent", 3, "crm_1")]


def test_a_refusal_fails_the_call_with_its_answer_and_a_notification(
        clean_db: Engine, crm: Settings, receiver: Receiver, queued_calls: list[bool]) -> None:
    apply(clean_db, crm, contact_event("cus_c", "evt_c4"))
    receiver.refuse_next = 1
    assert dispatcher.dispatch_due(clean_db, crm).failed == 1
    assert rows(clean_db, "SELECT status, response_status, response->>'error' FROM calls") == [
        ("failed", 422, "invalid contact")]
    assert rows(clean_db, "SELECT kind, provider FROM notifications") == [
        ("call.failed", "stripe")]
    assert dispatcher.dispatch_due(clean_db, crm).claimed == 0  # never sent again
    # What the target refused is fixed there: an operator sends it again, under a new key.
    env = {"DATABASE_URL": crm.database_url or "", "BROKER_URL": ""}
    assert CliRunner().invoke(main, ["calls", "settle", "contact:cus_c", "--sent"],
                              env=env).exit_code == 1  # --sent: for an ambiguous call only
    resent = CliRunner().invoke(main, ["calls", "settle", "contact:cus_c", "--resend"], env=env)
    assert resent.exit_code == 0, resent.output
    assert dispatcher.dispatch_due(clean_db, crm).sent == 1
    assert rows(clean_db, "SELECT status, key FROM calls") == [("sent", "contact:cus_c")]


def test_past_the_keys_lifetime_an_unknown_outcome_is_ambiguous_and_never_resent(
        clean_db: Engine, crm: Settings, receiver: Receiver, queued_calls: list[bool]) -> None:
    short = dataclasses.replace(crm, call_targets={
        **crm.call_targets, "crm": Target("crm", receiver.url, None, key_hours=1 / 3600)})
    apply(clean_db, short, contact_event("cus_d", "evt_c5"))
    receiver.fail_next = 100
    assert dispatcher.dispatch_due(clean_db, short).retried == 1
    time.sleep(1.1)
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE calls SET run_at = now()"))
    assert dispatcher.dispatch_due(clean_db, short).ambiguous == 1
    assert len(receiver.requests) == 1  # past the lifetime: not sent again
    assert rows(clean_db, "SELECT status FROM calls") == [("ambiguous",)]
    assert rows(clean_db, "SELECT kind FROM notifications") == [("call.ambiguous",)]
    # An operator settles it: made again under a new key, which the receiver makes once.
    receiver.fail_next = 0
    env = {"DATABASE_URL": short.database_url or "", "BROKER_URL": ""}
    listed = CliRunner().invoke(main, ["calls", "--status", "ambiguous", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output)["key"] == "contact:cus_d"
    settled = CliRunner().invoke(main, ["calls", "settle", "contact:cus_d", "--resend"],
                                 env=env)
    assert settled.exit_code == 0, settled.output
    assert dispatcher.dispatch_due(clean_db, short).sent == 1
    [(_, new_key, _)] = receiver.requests[1:]
    assert new_key is not None and new_key.startswith("contact:cus_d:resend:")
    again = CliRunner().invoke(main, ["calls", "settle", "contact:cus_d", "--sent"], env=env)
    assert again.exit_code == 1 and "no ambiguous call" in again.output


def test_an_unknown_target_fails_the_job_at_once(clean_db: Engine, settings: Settings) -> None:
    @handlers.handler("stripe", "test.calls.nowhere")
    def nowhere(ctx: handlers.JobContext) -> None:
        ctx.queue_call(key="k", target="nowhere", method="POST", path="/x")

    try:
        factories.insert_event_and_job(clean_db, factories.stripe_event(
            "test.calls.nowhere", {"id": "x"}, event_id="evt_nowhere"))
        jobs.process_batch(clean_db, settings)
    finally:
        handlers._registry.pop(("stripe", "test.calls.nowhere"))
    [(status, error)] = rows(clean_db, "SELECT status, last_error FROM jobs")
    assert status == "failed" and "no call target 'nowhere'" in error  # at once
    assert rows(clean_db, "SELECT count(*) FROM calls") == [(0,)]


def test_the_console_lists_the_ambiguous_calls(
        clean_db: Engine, crm: Settings, receiver: Receiver, queued_calls: list[bool]) -> None:
    from tests.integration.test_console import get, make_app

    apply(clean_db, crm, contact_event("cus_e", "evt_c6"), contact_event("cus_f", "evt_c7"))
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE calls SET status = 'ambiguous', last_error = 'unknown' "
                             "WHERE key = 'contact:cus_e'"))
    with make_app(clean_db, None).test_client() as client:
        page = get(client, "/calls?status=ambiguous").get_data(as_text=True)
        assert "contact:cus_e" in page and "contact:cus_f" not in page
        assert "webhooks calls settle KEY --sent" in page
        assert "contact:cus_f" in get(client, "/calls").get_data(as_text=True)
        assert get(client, "/calls?status=lost").status_code == 400


@pytest.mark.parametrize("status, kind", [
    (200, dispatch.Sent), (201, dispatch.Sent), (400, dispatch.Refused),
    (404, dispatch.Refused), (422, dispatch.Refused), (409, dispatch.Unknown),
    (429, dispatch.Unknown), (500, dispatch.Unknown), (503, dispatch.Unknown),
    (None, dispatch.Unknown)])
def test_what_an_answer_says_of_a_call(status: int | None, kind: type) -> None:
    """A 409 is the key's first request still in flight, a 429 a limit: both unknown, like
    a 5xx or no answer; retried with the key. Any other 4xx is the target's refusal."""
    assert isinstance(dispatcher.Answer(status).outcome(), kind)
