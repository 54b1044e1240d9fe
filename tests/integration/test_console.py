"""The operator console through Flask's test client, on the real Postgres: credentials on
every page, CSRF on every change, read-only mode, replay (failed jobs only), email retry
(same key), the listing's filters and pages, escaping, and the blueprint under a prefix."""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

import pytest
import sqlalchemy as sa
from dramatiq.brokers.stub import StubBroker
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.engine import Engine

from tests import factories
from tests.console_helpers import (
    PASSWORD,
    basic,
    done_event,
    email,
    email_row,
    failed_event,
    job,
    token_in,
)
from webhooks.console import ConsoleSettings, create_blueprint
from webhooks.shared import wakeups
from webhooks.shared.settings import Settings

POST_FORM = re.compile(r'<form method="post"')


@pytest.fixture()
def broker() -> StubBroker:
    stub = StubBroker()
    for queue in (wakeups.JOBS_QUEUE, wakeups.OUTBOX_QUEUE):
        stub.declare_queue(queue)
    return stub


def make_app(engine: Engine, broker: StubBroker | None, *, readonly: bool = False,
             prefix: str | None = None) -> Flask:
    app = Flask(__name__)
    settings = ConsoleSettings(password=PASSWORD, readonly=readonly)
    app.register_blueprint(create_blueprint(engine, settings, broker=broker), url_prefix=prefix)
    return app


@pytest.fixture()
def client(clean_db: Engine, broker: StubBroker) -> Iterator[FlaskClient]:
    with make_app(clean_db, broker).test_client() as test_client:
        yield test_client


def get(client: FlaskClient, path: str, **kwargs: Any) -> Any:
    return client.get(path, headers=basic(), **kwargs)


def post(client: FlaskClient, path: str, data: dict[str, Any]) -> Any:
    return client.post(path, headers=basic(), data=data)


def page_token(client: FlaskClient) -> str:
    """The token of Replay all's confirmation form (there must be a failed job)."""
    return token_in(get(client, "/events/replay").get_data(as_text=True))


def jobs_woken(broker: StubBroker) -> int:
    return len(broker.queues[wakeups.JOBS_QUEUE].queue)


# --- credentials ------------------------------------------------------------------------

PAGES = ["/", "/events", "/events?status=failed", "/emails", "/events/stripe/evt_1",
         "/events/replay", "/notifications", "/console-static/console.css"]


@pytest.mark.parametrize("path", PAGES)
@pytest.mark.parametrize("credentials", [None, ("admin", "wrong"), ("root", PASSWORD),
                                         ("admin", ""), ("admin", PASSWORD + "x")])
def test_every_page_answers_401_with_a_basic_challenge_without_the_right_credentials(
        client: FlaskClient, path: str, credentials: tuple[str, str] | None) -> None:
    headers = basic(*credentials) if credentials else {}
    response = client.get(path, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Basic realm=")
    assert "csrf_token" not in response.get_data(as_text=True)


def test_every_page_answers_with_the_right_credentials(client: FlaskClient,
                                                      clean_db: Engine) -> None:
    failed_event(clean_db)
    for path in PAGES:
        response = get(client, path)
        assert response.status_code == (404 if path == "/events/stripe/evt_1" else 200), path


def test_a_post_without_credentials_changes_nothing(client: FlaskClient,
                                                     clean_db: Engine) -> None:
    job_id = failed_event(clean_db)
    token = page_token(client)
    response = client.post(f"/jobs/{job_id}/replay", data={"csrf_token": token})
    assert response.status_code == 401
    assert job(clean_db, job_id).status == "failed"


class Unreadable(io.BytesIO):
    """A request body that must not be read: the test fails if it is."""

    def read(self, *args: Any) -> bytes:
        raise AssertionError("the body was read before the credentials were checked")

    readline = read1 = read  # type: ignore[assignment]

    def readinto(self, *args: Any) -> int:
        raise AssertionError("the body was read before the credentials were checked")


@pytest.mark.parametrize("credentials", [None, ("admin", "wrong password!")])
def test_a_post_is_authenticated_before_its_body_is_read(
        client: FlaskClient, credentials: tuple[str, str] | None) -> None:
    """Security review 2026-12c, section 6: the NUL check read the form (the whole body)
    before the credentials, so a stranger's stalled body held an app thread."""
    headers = basic(*credentials) if credentials else {}
    response = client.post("/sources/stripe/stripe/pause", headers=headers,
                           input_stream=Unreadable(),  # type: ignore[arg-type]
                           content_type="application/x-www-form-urlencoded",
                           content_length=60000)
    assert response.status_code == 401
    nul = client.post("/sources/stripe/stripe/pause", headers=headers,
                      data={"csrf_token": "a\x00b"})
    assert nul.status_code == 401  # the 400 for the NUL comes after the credentials
    assert post(client, "/sources/stripe/stripe/pause", {"csrf_token": "a\x00b"}) \
        .status_code == 400


# --- CSRF --------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "", "garbage", "InRoZWlyIg.Z3xGkQ.forged"])
def test_a_post_without_a_valid_csrf_token_changes_nothing(
        client: FlaskClient, clean_db: Engine, broker: StubBroker, token: str | None) -> None:
    job_id = failed_event(clean_db)
    email_id = email(clean_db, "receipt:in_1", "failed")
    data = {} if token is None else {"csrf_token": token}
    for path in (f"/jobs/{job_id}/replay", "/events/replay", f"/emails/{email_id}/retry"):
        response = post(client, path, data)
        assert response.status_code in (400, 403), path
    assert job(clean_db, job_id).status == "failed"
    assert email_row(clean_db, email_id).status == "failed"
    assert jobs_woken(broker) == 0


def test_a_token_of_another_console_password_or_user_is_refused(
        clean_db: Engine, broker: StubBroker) -> None:
    job_id = failed_event(clean_db)
    other = Flask(__name__)
    other.register_blueprint(create_blueprint(
        clean_db, ConsoleSettings(password="another password")))
    with other.test_client() as other_client:
        foreign = token_in(other_client.get(
            "/events/replay", headers=basic(password="another password")).get_data(
            as_text=True))
    with make_app(clean_db, broker).test_client() as client:
        assert post(client, f"/jobs/{job_id}/replay", {"csrf_token": foreign}).status_code \
            == 403
    assert job(clean_db, job_id).status == "failed"


def test_two_console_processes_with_one_password_accept_each_others_tokens(
        clean_db: Engine, broker: StubBroker) -> None:
    job_id = failed_event(clean_db)
    with make_app(clean_db, broker).test_client() as first:
        token = page_token(first)
    with make_app(clean_db, broker).test_client() as second:
        assert post(second, f"/jobs/{job_id}/replay", {"csrf_token": token}).status_code == 303
    assert job(clean_db, job_id).status == "pending"


# --- replay ------------------------------------------------------------------------------


def test_replay_moves_a_failed_job_to_pending_and_wakes_a_worker(
        client: FlaskClient, clean_db: Engine, broker: StubBroker) -> None:
    event = factories.stripe_event("invoice.paid", factories.invoice(), event_id="evt_fail")
    job_id = failed_event(clean_db, event, error="KeyError: 'amount_paid'")
    page = get(client, "/events/stripe/evt_fail").get_data(as_text=True)
    assert "KeyError: &#39;amount_paid&#39;" in page
    assert f'action="/jobs/{job_id}/replay"' in page
    response = post(client, f"/jobs/{job_id}/replay", {"csrf_token": token_in(page)})
    assert response.status_code == 303
    assert response.headers["Location"].startswith("/events/stripe/evt_fail?")
    row = job(clean_db, job_id)
    assert (row.status, row.attempts) == ("pending", 0)
    assert jobs_woken(broker) == 1
    shown = client.get(response.headers["Location"], headers=basic()).get_data(as_text=True)
    assert "Replayed 1 job(s)" in shown
    assert f'action="/jobs/{job_id}/replay"' not in shown  # pending: no button


def test_replay_refuses_a_done_job_and_changes_nothing(
        client: FlaskClient, clean_db: Engine, broker: StubBroker) -> None:
    job_id = done_event(clean_db)
    assert "Replay" not in get(client, "/events").get_data(as_text=True)
    failed_event(clean_db)  # for a page with a form, and its token
    response = post(client, f"/jobs/{job_id}/replay", {"csrf_token": page_token(client)})
    assert response.status_code == 409
    assert "done" in response.get_data(as_text=True)
    row = job(clean_db, job_id)
    assert (row.status, row.attempts) == ("done", 1)
    assert jobs_woken(broker) == 0


def test_the_event_page_of_a_done_job_has_no_replay_button(client: FlaskClient,
                                                           clean_db: Engine) -> None:
    event = factories.stripe_event("invoice.paid", factories.invoice(), event_id="evt_done")
    done_event(clean_db, event)
    page = get(client, "/events/stripe/evt_done").get_data(as_text=True)
    assert "/replay" not in page and "Replay" not in page


def test_replay_all_says_how_many_then_moves_exactly_the_filtered_failed_jobs(
        client: FlaskClient, clean_db: Engine, broker: StubBroker) -> None:
    matching = [failed_event(clean_db, factories.stripe_event("invoice.paid",
                                                              factories.invoice()))
                for _ in range(3)]
    other_type = [failed_event(clean_db, factories.stripe_event("charge.refunded", {}))
                  for _ in range(2)]
    other_provider = failed_event(clean_db, {"id": "gh_1", "type": "invoice.paid"},
                                  provider="github")
    done = done_event(clean_db)
    listing = get(client, "/events?status=failed&type=invoice.paid&provider=stripe")
    html = listing.get_data(as_text=True)
    assert "3 event(s) match" in html
    link = re.search(r'href="(/events/replay\?[^"]+)"', html)
    assert link, "no Replay all link"
    confirm = get(client, link.group(1).replace("&amp;", "&")).get_data(as_text=True)
    assert '<strong id="replay-count">3</strong>' in confirm
    assert all(job(clean_db, j).status == "failed" for j in matching)  # the count moved none
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', confirm))
    response = post(client, "/events/replay", fields)
    assert response.status_code == 303
    assert "n=3" in response.headers["Location"]
    assert [job(clean_db, j).status for j in matching] == ["pending"] * 3
    assert [job(clean_db, j).status for j in other_type] == ["failed"] * 2
    assert job(clean_db, other_provider).status == "failed"
    assert job(clean_db, done).status == "done"
    assert jobs_woken(broker) == 1  # one wake-up per claim's worth of jobs


def test_replay_alls_confirmation_is_a_get_that_locks_nothing(
        clean_db: Engine, broker: StubBroker) -> None:
    """A GET can come from another site (an <img> with cached Basic credentials): it counts,
    and neither takes nor waits for a row lock (a worker holds this one)."""
    job_id = failed_event(clean_db)
    pages: list[str] = []
    with clean_db.connect() as holder:
        holder.execute(sa.text("SELECT 1 FROM jobs WHERE id = :id FOR UPDATE"), {"id": job_id})
        client = make_app(clean_db, broker).test_client()  # its own, in the reader's thread
        reader = threading.Thread(target=lambda: pages.append(
            get(client, "/events/replay").get_data(as_text=True)))
        reader.start()
        reader.join(5)
        answered_while_locked = not reader.is_alive()
        holder.rollback()  # frees a reader that waited, so that the test ends either way
    reader.join(10)
    assert answered_while_locked
    assert pages and '<strong id="replay-count">1</strong>' in pages[0]


def test_replay_all_with_a_search_moves_only_the_events_found(
        client: FlaskClient, clean_db: Engine) -> None:
    found = failed_event(clean_db, factories.stripe_event(
        "invoice.paid", factories.invoice(email="unique.person@example.org")))
    others = [failed_event(clean_db) for _ in range(2)]
    confirm = get(client, "/events/replay?search=unique.person@example.org").get_data(
        as_text=True)
    assert '<strong id="replay-count">1</strong>' in confirm
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', confirm))
    assert fields["search"] == "unique.person@example.org"
    assert post(client, "/events/replay", fields).status_code == 303
    assert job(clean_db, found).status == "pending"
    assert [job(clean_db, j).status for j in others] == ["failed", "failed"]


def test_replay_all_with_nothing_failed_matching_moves_nothing(
        client: FlaskClient, clean_db: Engine) -> None:
    other = failed_event(clean_db)
    confirm = get(client, "/events/replay?type=no.such.type").get_data(as_text=True)
    assert '<strong id="replay-count">0</strong>' in confirm and "<form method=\"post\"" \
        not in confirm
    response = post(client, "/events/replay", {"type": "no.such.type",
                                               "csrf_token": page_token(client)})
    assert response.status_code == 303 and "n=0" in response.headers["Location"]
    assert job(clean_db, other).status == "failed"  # an empty match is not "every job"


# --- emails ------------------------------------------------------------------------------


def test_retry_puts_a_failed_email_back_to_pending_with_the_same_key(
        client: FlaskClient, clean_db: Engine, broker: StubBroker) -> None:
    failed = email(clean_db, "receipt:in_42", "failed")
    sent = email(clean_db, "receipt:in_43", "sent", message_id="pm-msg-0001")
    page = get(client, "/emails?status=failed").get_data(as_text=True)
    assert "receipt:in_42" in page and "receipt:in_43" not in page
    assert f'action="/emails/{failed}/retry"' in page
    assert post(client, f"/emails/{failed}/retry",
                {"csrf_token": token_in(page)}).status_code == 303
    assert tuple(email_row(clean_db, failed)) == ("pending", "receipt:in_42")
    assert len(broker.queues[wakeups.OUTBOX_QUEUE].queue) == 1
    everything = get(client, "/emails").get_data(as_text=True)
    assert "pm-msg-0001" in everything and f'action="/emails/{sent}/retry"' not in everything
    response = post(client, f"/emails/{sent}/retry", {"csrf_token": token_in(page)})
    assert "notice=not_failed" in response.headers["Location"]
    assert tuple(email_row(clean_db, sent)) == ("sent", "receipt:in_43")


def test_the_event_page_shows_its_emails_with_status_and_postmark_message_id(
        client: FlaskClient, clean_db: Engine) -> None:
    event = factories.stripe_event("invoice.paid", factories.invoice(), event_id="evt_mail")
    done_event(clean_db, event)
    email(clean_db, "receipt:in_mail", "sent", event=("stripe", "evt_mail"),
          message_id="b7bc2f4a-e38e-4336-af7d-e6c392c2f817")
    failed = email(clean_db, "payment_failed:evt_mail", "failed", event=("stripe", "evt_mail"))
    page = get(client, "/events/stripe/evt_mail").get_data(as_text=True)
    assert "b7bc2f4a-e38e-4336-af7d-e6c392c2f817" in page and "receipt:in_mail" in page
    response = post(client, f"/emails/{failed}/retry",
                    {"csrf_token": token_in(page), "from": "event"})
    assert response.headers["Location"].startswith("/events/stripe/evt_mail?")


def test_bad_email_status_filter_is_a_400(client: FlaskClient) -> None:
    assert get(client, "/emails?status=bogus").status_code == 400


# --- read-only ---------------------------------------------------------------------------


def test_read_only_shows_everything_renders_no_button_and_refuses_every_post(
        clean_db: Engine, broker: StubBroker) -> None:
    event = factories.stripe_event("invoice.paid", factories.invoice(), event_id="evt_ro")
    job_id = failed_event(clean_db, event, error="RuntimeError: read me")
    email_id = email(clean_db, "receipt:ro", "failed", event=("stripe", "evt_ro"))
    with make_app(clean_db, broker).test_client() as writable:
        token = page_token(writable)  # a valid token, from a console that may write
    with make_app(clean_db, broker, readonly=True).test_client() as client:
        for path in ("/", "/events?status=failed", "/events/stripe/evt_ro", "/emails",
                     "/events/replay"):
            html = get(client, path).get_data(as_text=True)
            assert not POST_FORM.search(html) and "<button" not in html.replace(
                '<button type="submit">Filter</button>', ""), path
        assert "RuntimeError: read me" in get(client, "/events/stripe/evt_ro").get_data(
            as_text=True)
        for path in (f"/jobs/{job_id}/replay", "/events/replay", f"/emails/{email_id}/retry"):
            assert post(client, path, {"csrf_token": token}).status_code == 403, path
    assert job(clean_db, job_id).status == "failed"
    assert email_row(clean_db, email_id).status == "failed"
    assert jobs_woken(broker) == 0


# --- listing: filters, pages, search ------------------------------------------------------


def _ids_on(html: str) -> list[str]:
    return [unquote(found) for found in re.findall(r'href="/events/stripe/([^"?]+)"', html)]


def test_pages_of_50_newest_first_with_an_older_link_until_the_end(
        client: FlaskClient, clean_db: Engine) -> None:
    ids = []
    for n in range(120):
        event = factories.stripe_event("invoice.paid", factories.invoice(), event_id=f"evt_{n:03}")
        factories.insert_event_and_job(clean_db, event)
        ids.append(event["id"])
    seen: list[str] = []
    path: str | None = "/events"
    pages = 0
    while path:
        html = get(client, path).get_data(as_text=True)
        seen.extend(_ids_on(html))
        older = re.search(r'<a rel="next" href="([^"]+)"', html)
        path = older.group(1).replace("&amp;", "&") if older else None
        pages += 1
    assert pages == 3
    assert seen == list(reversed(ids))


def test_filters_by_provider_type_status_and_received_time(
        client: FlaskClient, clean_db: Engine) -> None:
    old = factories.stripe_event("invoice.paid", factories.invoice(), event_id="evt_old")
    factories.insert_event_and_job(clean_db, old, status="done")
    with clean_db.begin() as conn:
        conn.execute(sa.text("UPDATE webhook_events SET received_at = now() - interval "
                             "'3 days' WHERE event_id = 'evt_old'"))
    failed_event(clean_db, factories.stripe_event("charge.refunded", {}, event_id="evt_ref"))
    factories.insert_event_and_job(clean_db, {"id": "gh_9", "type": "push"}, "github")
    yesterday = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")

    def shown(query: str) -> set[str]:
        html = get(client, f"/events?{query}").get_data(as_text=True)
        return set(re.findall(r'href="/events/(?:stripe|github)/([^"?]+)"', html))

    assert shown("") == {"evt_old", "evt_ref", "gh_9"}
    assert shown("provider=github") == {"gh_9"}
    assert shown("type=charge.refunded") == {"evt_ref"}
    assert shown("status=failed") == {"evt_ref"}
    assert shown("status=done") == {"evt_old"}
    assert shown(f"since={yesterday}") == {"evt_ref", "gh_9"}
    assert shown(f"until={yesterday}") == {"evt_old"}
    assert shown("search=evt_ref") == {"evt_ref"}


def test_search_finds_an_event_by_a_word_of_its_payload(client: FlaskClient,
                                                        clean_db: Engine) -> None:
    factories.insert_event_and_job(clean_db, factories.stripe_event(
        "invoice.paid", factories.invoice("in_ZX81abc", email="ada@analytical.example"),
        event_id="evt_ada"), status="done")  # its job has run: its document is written
    factories.insert_event_and_job(clean_db, factories.stripe_event(
        "invoice.paid", factories.invoice(), event_id="evt_other"), status="done")
    for text in ("ada@analytical.example", "in_ZX81abc"):
        html = get(client, "/events", query_string={"search": text}).get_data(as_text=True)
        assert _ids_on(html) == ["evt_ada"], text
    assert "searchable by its words once its job has run" in html


def test_an_event_whose_job_has_not_run_is_found_by_its_id_only(
        client: FlaskClient, clean_db: Engine) -> None:
    factories.insert_event_and_job(clean_db, factories.stripe_event(
        "invoice.paid", factories.invoice(email="soon@analytical.example"),
        event_id="evt_soon"))  # pending: acknowledged, not run yet
    assert _ids_on(get(client, "/events", query_string={"search": "evt_soon"}).get_data(
        as_text=True)) == ["evt_soon"]
    assert _ids_on(get(client, "/events", query_string={
        "search": "soon@analytical.example"}).get_data(as_text=True)) == []


@pytest.mark.parametrize("query", ["status=exploded", "since=yesterday", "until=2026-13-01",
                                   "after=not-a-token"])
def test_a_bad_filter_is_a_400_naming_it(client: FlaskClient, query: str) -> None:
    response = get(client, f"/events?{query}")
    assert response.status_code == 400
    assert query.split("=")[0] in response.get_data(as_text=True)


# --- escaping and odd event ids -----------------------------------------------------------

ODD_IDS = ["evt/with/slashes", "a?b#c%20d&e=f", "../../etc/passwd", "/leading//double/",
           "trailing/", "sp ace+plus", "ünïcødé/✓", "<b>bold</b>"]


@pytest.mark.parametrize("event_id", ODD_IDS)
def test_an_event_with_any_printable_id_is_linked_and_shown(
        client: FlaskClient, clean_db: Engine, event_id: str) -> None:
    failed_event(clean_db, factories.stripe_event("invoice.paid", factories.invoice(),
                                                  event_id=event_id))
    html = get(client, "/events").get_data(as_text=True)
    link = re.search(r'href="(/events/stripe/[^"]+)"', html)
    assert link
    page = get(client, link.group(1).replace("&amp;", "&"))
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert 'id="last-error"' in text
    escaped = event_id.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert escaped in text


def test_everything_from_a_payload_is_escaped(client: FlaskClient, clean_db: Engine) -> None:
    hostile = '<script>alert("x")</script>'
    event = factories.stripe_event("<img src=x onerror=alert(1)>",
                                   factories.invoice(email=hostile), event_id="<i>evt</i>")
    failed_event(clean_db, event, error=f"ValueError: {hostile}")
    email(clean_db, hostile, "failed", event=("stripe", "<i>evt</i>"))
    for path in ("/", "/events", "/events?status=failed", "/emails"):
        html = get(client, path).get_data(as_text=True)
        assert "<script" not in html and "<img" not in html and "<i>evt" not in html, path
    link = re.search(r'href="(/events/stripe/[^"]+)"', get(client, "/events").get_data(
        as_text=True))
    assert link
    html = get(client, link.group(1)).get_data(as_text=True)
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;" in html


def test_a_payloads_bidi_overrides_and_c1_controls_are_shown_escaped(
        client: FlaskClient, clean_db: Engine) -> None:
    """U+202E reverses the text after it on the page, U+009B is a CSI on some terminals
    a payload is pasted into: shown as the JSON escapes that read back as them."""
    tricky = "pay \u202egnp.exe\u009b[2J done"
    failed_event(clean_db, factories.stripe_event(
        "invoice.paid", factories.invoice(email=tricky), event_id="evt_bidi"))
    html = get(client, "/events/stripe/evt_bidi").get_data(as_text=True)
    payload = html.split('<pre id="payload">', 1)[1].split("</pre>", 1)[0]
    assert "\u202e" not in payload and "\u009b" not in payload
    assert "pay \\u202egnp.exe\\u009b[2J done" in payload


# --- the page itself ------------------------------------------------------------------------


def test_pages_load_nothing_from_another_host_and_forbid_it(client: FlaskClient,
                                                            clean_db: Engine) -> None:
    failed_event(clean_db, factories.stripe_event("invoice.paid", factories.invoice(),
                                                  event_id="evt_h"))
    for path in ("/", "/events", "/events/stripe/evt_h", "/emails"):
        response = get(client, path)
        html = response.get_data(as_text=True)
        assert not re.search(r'(src|href)="(https?:)?//', html), path
        assert "<script" not in html
        assert "default-src 'none'" in response.headers["Content-Security-Policy"]
        assert response.headers["Cache-Control"] == "no-store"


def test_the_overview_counts_per_provider_and_charts_24_hours(client: FlaskClient,
                                                              clean_db: Engine) -> None:
    failed_event(clean_db)
    done_event(clean_db)
    factories.insert_event_and_job(clean_db, {"id": "gh_1", "type": "push"}, "github")
    html = get(client, "/").get_data(as_text=True)
    rows = re.findall(r"<tr>\s*<td><a [^>]*>(\w+)</a></td>(.*?)</tr>", html, re.S)
    cells = {name: re.findall(r'<td[^>]*>(?:<a [^>]*>)?([^<]*)', rest) for name, rest in rows}
    assert cells["stripe"][:5] == ["2", "0", "0", "1", "1"]
    assert cells["stripe"][5] == "no"  # paused
    assert cells["github"][:5] == ["1", "0", "1", "0", "0"]
    assert html.count('<rect class="bar"') == 24
    assert "3 in all" in html


def test_the_overview_lists_every_configured_source_before_its_first_event(
        clean_db: Engine, broker: StubBroker, settings: Settings) -> None:
    """A new Connect endpoint, configured but with no rows yet, is listed with zeros and
    its Pause button; pressing it pauses that source alone. Without the registry the
    overview would show only the sources that have rows."""
    from webhooks.console.app import create_app
    from webhooks.shared import pausing

    configured = Settings.from_env({
        "DATABASE_URL": settings.database_url or "", "BROKER_URL": settings.broker_url or "",
        "STRIPE_WEBHOOK_SECRET": "whsec_platform", "STRIPE_SOURCES": "connect",
        "STRIPE_CONNECT_WEBHOOK_SECRET": "whsec_connect", "STRIPE_CONNECT_CONNECT": "1",
        "GITHUB_WEBHOOK_SECRET": "github-secret"})
    factories.insert_event_and_job(clean_db, {"id": "gh_only", "type": "push"}, "github")
    app = create_app(configured, ConsoleSettings(password=PASSWORD), threads=1)
    with app.test_client() as client:
        html = get(client, "/").get_data(as_text=True)
        rows = re.findall(r"<tr>\s*<td><a [^>]*>([\w/]+)</a></td>(.*?)</tr>", html, re.S)
        cells = {name: re.findall(r'<td[^>]*>(?:<a [^>]*>)?([^<]*)', rest)
                 for name, rest in rows}
        assert sorted(cells) == ["github", "stripe", "stripe/connect"]
        assert cells["stripe/connect"][:6] == ["0", "0", "0", "0", "0", "no"]
        assert cells["github"][:2] == ["1", "0"]
        assert 'aria-label="Pause stripe/connect"' in html
        response = post(client, "/sources/stripe/connect/pause", {"csrf_token": token_in(html)})
        assert response.status_code == 303
        html = get(client, "/").get_data(as_text=True)
    assert 'aria-label="Resume stripe/connect"' in html
    assert 'aria-label="Pause stripe"' in html  # the platform's source runs on
    with clean_db.connect() as conn:
        assert [p.label for p in pausing.paused(conn)] == ["stripe/connect"]


def test_mounted_under_a_prefix_every_link_and_form_stays_under_it(
        clean_db: Engine, broker: StubBroker) -> None:
    event = factories.stripe_event("invoice.paid", factories.invoice(), event_id="evt/pre")
    job_id = failed_event(clean_db, event)
    app = make_app(clean_db, broker, prefix="/ops")

    @app.get("/")
    def home() -> str:  # the host app's own page, untouched by the console's auth
        return "host app"

    with app.test_client() as client:
        assert client.get("/").get_data(as_text=True) == "host app"
        assert client.get("/ops/").status_code == 401
        html = get(client, "/ops/events").get_data(as_text=True)
        paths = re.findall(r'(?:href|action)="([^"]+)"', html)
        assert paths and all(path.startswith("/ops/") for path in paths), paths
        assert get(client, "/ops/console-static/console.css").status_code == 200
        page = get(client, "/ops/events/stripe/evt%2Fpre").get_data(as_text=True)
        assert f'action="/ops/jobs/{job_id}/replay"' in page
        response = post(client, f"/ops/jobs/{job_id}/replay", {"csrf_token": token_in(page)})
        assert response.headers["Location"].startswith("/ops/events/stripe/evt%2Fpre")
    assert job(clean_db, job_id).status == "pending"


def test_failed_logins_are_logged_and_a_client_that_keeps_failing_gets_429(  # type: ignore[no-untyped-def]
        client: FlaskClient, caplog) -> None:
    for _ in range(5):
        assert client.get("/", headers=basic(password="wrong guess 123")).status_code == 401
    failures = [r for r in caplog.records if r.getMessage() == "console login failed"]
    assert len(failures) == 5 and all(r.address == "127.0.0.1" for r in failures)  # type: ignore[attr-defined]
    blocked = client.get("/", headers=basic())  # even the right password, for a while
    assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) >= 1
    other = client.get("/", headers=basic(), environ_base={"REMOTE_ADDR": "10.0.0.9"})
    assert other.status_code == 200  # another address is not held back


def proxied_app(settings: Settings, trusted_proxies: int) -> Flask:
    from webhooks.console.app import create_app

    behind = replace(settings, trusted_proxies=trusted_proxies)
    return create_app(behind, ConsoleSettings(password=PASSWORD), threads=1)


def test_behind_trusted_proxies_a_lockout_holds_the_failing_client_alone(  # type: ignore[no-untyped-def]
        clean_db: Engine, settings: Settings, caplog) -> None:
    """Security review 2026-12c, section 13: behind a proxy every operator shared its
    address, so five bad logins from anyone were a 429 for every operator. With
    TRUSTED_PROXIES=1 the client is the entry the proxy appended, as for the ingest; what
    the client wrote left of it is never looked at."""
    proxy = {"REMOTE_ADDR": "10.0.0.1"}
    with proxied_app(settings, 1).test_client() as client:
        for forged in ("", "198.51.100.2, ", "198.51.100.3, ", "", ""):
            headers = {**basic(password="wrong guess 123"),
                       "X-Forwarded-For": f"{forged}203.0.113.7"}
            assert client.get("/", headers=headers, environ_base=proxy).status_code == 401
        failures = [r for r in caplog.records if r.getMessage() == "console login failed"]
        assert {r.address for r in failures} == {"203.0.113.7"}  # type: ignore[attr-defined]
        attacker = {**basic(), "X-Forwarded-For": "203.0.113.7"}
        assert client.get("/", headers=attacker, environ_base=proxy).status_code == 429
        for operator in ("198.51.100.2", "198.51.100.3", "198.51.100.4"):
            headers = {**basic(), "X-Forwarded-For": operator}
            assert client.get("/", headers=headers, environ_base=proxy).status_code == 200
    # TRUSTED_PROXIES=0 (the default): X-Forwarded-For is the client's to write, not believed.
    with proxied_app(settings, 0).test_client() as client:
        for n in range(5):
            headers = {**basic(password="wrong guess 123"), "X-Forwarded-For": f"192.0.2.{n}"}
            assert client.get("/", headers=headers).status_code == 401
        assert client.get("/", headers=basic()).status_code == 429  # the peer, 127.0.0.1


def test_ipv6_failures_count_per_64(client: FlaskClient) -> None:
    """An IPv6 client holds a /64: rotating addresses inside it is one client."""
    for n in range(1, 6):
        peer = {"REMOTE_ADDR": f"2001:db8:1:2::{n}"}
        wrong = basic(password="wrong guess 123")
        assert client.get("/", headers=wrong, environ_base=peer).status_code == 401
    same_64 = {"REMOTE_ADDR": "2001:db8:1:2:ffff::6"}
    assert client.get("/", headers=basic(password="wrong guess 123"),
                      environ_base=same_64).status_code == 429
    other_64 = {"REMOTE_ADDR": "2001:db8:1:3::1"}
    assert client.get("/", headers=basic(), environ_base=other_64).status_code == 200
    mapped = {"REMOTE_ADDR": "::ffff:192.0.2.1"}  # a dual-stack socket's IPv4 client
    assert client.get("/", headers=basic(), environ_base=mapped).status_code == 200


def test_a_short_console_password_is_refused() -> None:
    from webhooks.shared.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^CONSOLE_PASSWORD"):
        ConsoleSettings(password="eleven char").require_password()
    ConsoleSettings(password="twelve chars").require_password()


def test_a_csrf_token_is_no_cheap_offline_test_of_the_password(
        clean_db: Engine, broker: StubBroker) -> None:
    """The attack this stops: the token's key was an HMAC of the password, so one token let
    anyone test guesses at memory speed. The key is now scrypt of it (or
    CONSOLE_SECRET_KEY, shared by every console process)."""
    import hashlib
    import hmac

    from itsdangerous import BadSignature, URLSafeTimedSerializer

    from webhooks.console.auth import signing_key

    failed_event(clean_db)
    with make_app(clean_db, broker).test_client() as test_client:
        token = page_token(test_client)
    cheap = hmac.new(PASSWORD.encode(), b"webhooks console: CSRF signing key", hashlib.sha256)
    with pytest.raises(BadSignature):
        URLSafeTimedSerializer(cheap.hexdigest(), salt="webhooks-console-csrf").loads(token)
    started = time.perf_counter()
    signing_key(ConsoleSettings(password=PASSWORD))
    assert time.perf_counter() - started > 0.01  # each guess costs a key derivation
    shared = ConsoleSettings(password=PASSWORD, secret_key="one key for every console")
    assert signing_key(shared) == "one key for every console"


MALFORMED = ["/events?search=a%00b", "/events?type=%00", "/events?provider=x%00",
             "/events/stripe/evt%00x", "/events?after=99999999999999999999999",
             "/events?after=not-a-cursor", "/emails?before=99999999999999999999",
             "/emails?before=-99999999999999999999",
             "/events?since=%00", "/emails?status=%00", "/events?after=2026-01-01T00:00:00%00"]


@pytest.mark.parametrize("path", MALFORMED)
def test_malformed_input_is_a_4xx_never_a_500(client: FlaskClient, path: str) -> None:
    assert 400 <= get(client, path).status_code < 500, path


@pytest.mark.parametrize("path", ["/jobs/99999999999999999999/replay",
                                  "/emails/99999999999999999999/retry"])
def test_an_out_of_range_id_is_a_4xx_never_a_500(client: FlaskClient, clean_db: Engine,
                                                 path: str) -> None:
    failed_event(clean_db)
    token = page_token(client)
    assert 400 <= post(client, path, {"csrf_token": token}).status_code < 500


def test_the_console_apps_own_answers_carry_the_headers_and_merge_no_slashes(
        settings: Settings) -> None:
    from webhooks.console.app import create_app
    from webhooks.console.blueprint import SECURITY_HEADERS

    app = create_app(settings, ConsoleSettings(password=PASSWORD), threads=1)
    client = app.test_client()
    unrouted = client.get("/no/such/page")
    wrong_method = client.put("/", headers=basic())
    doubled = client.get("/console-static//console.css", headers={"Host": "evil.example"})
    assert (unrouted.status_code, wrong_method.status_code) == (404, 405)
    assert doubled.status_code == 404 and "Location" not in doubled.headers
    for response in (unrouted, wrong_method, doubled):
        for header, value in SECURITY_HEADERS.items():
            assert response.headers.get(header) == value, (response.status, header)


# --- notifications ------------------------------------------------------------------------


def test_the_notifications_page_lists_them_newest_first_with_their_channels(
        client: FlaskClient, clean_db: Engine, settings: Settings) -> None:
    import dataclasses

    from webhooks.shared import db, notifications
    from webhooks.shared.notifications import Kind, Occurrence

    slack = dataclasses.replace(settings, notify_slack_webhook_url="http://127.0.0.1:9/x")
    with db.transaction(clean_db) as conn:
        notifications.record(conn, slack, [Occurrence(Kind.JOB_FAILED, "stripe", "connect",
                                                      error="<script>boom</script>")])
    with db.transaction(clean_db) as conn:
        notifications.record(conn, settings, [Occurrence(Kind.DATABASE_FAILOVER)])
    page = get(client, "/notifications").get_data(as_text=True)
    table = page.split("<table>")[-1]  # after the filters' choices
    assert table.index("database.failover") < table.index("job.failed")
    assert "stripe/connect" in page and "no channel" in page and "slack" in page
    assert "<script>boom" not in page and "&lt;script&gt;boom" in page
    assert 'href="/notifications"' in get(client, "/").get_data(as_text=True)
    only = get(client, "/notifications?kind=job.failed").get_data(as_text=True)
    assert "job.failed" in only and "database.failover" not in only.split("<table>")[-1]
    assert get(client, "/notifications?kind=nope").status_code == 400
    assert "<form method=\"post\"" not in page  # read-only
