"""The fake Stripe API's object creation (`POST /v1/refunds`, `POST /v1/credit_notes`) and
its idempotency keys (docs.stripe.com/api/idempotent_requests), driven by the official
`stripe` library as production drives Stripe: a replay answers the first answer with
`Idempotent-Replayed: true`, other params are an idempotency_error, a key in flight a 409,
a lost answer is found again with the key, a saved 500 is replayed, a 500 before the
request began is not, and a key past its lifetime is new again. No database: only the
fake (tests/fakes/provider_apis.py) and the library."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import stripe

from tests.fakes import provider_events
from tests.fakes.provider_apis import STRIPE_KEY, FakeProviderApis

REFUND = {"charge": "ch_refund_me", "amount": 500, "reason": "requested_by_customer",
          "metadata": {"order": "ord_1"}}


@pytest.fixture()
def fake() -> Iterator[FakeProviderApis]:
    with FakeProviderApis() as running:
        yield running


@pytest.fixture()
def client(fake: FakeProviderApis) -> stripe.StripeClient:
    return stripe.StripeClient(STRIPE_KEY, base_addresses={"api": fake.url},
                               max_network_retries=0)


def refund(client: stripe.StripeClient, key: str, **params: Any) -> stripe.Refund:
    return client.v1.refunds.create(params={**REFUND, **params},
                                 options={"idempotency_key": key})


def headers(obj: stripe.StripeObject) -> Any:
    assert obj.last_response is not None
    return obj.last_response.headers


def body(obj: stripe.StripeObject) -> dict[str, Any]:
    assert obj.last_response is not None
    return json.loads(obj.last_response.body)


def test_a_refund_is_stripes_published_refund_with_the_params_applied(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    made = refund(client, "key-shape")
    published = provider_events.published("stripe/objects/refund.json")
    served = body(made)
    assert list(served) == list(published)  # the published fields, in the published order
    assert made.id.startswith("re_") and made.id != published["id"]
    assert abs(made.created - time.time()) < 5
    assert (made.amount, made.charge, made.reason, made.metadata.to_dict()) == (
        500, "ch_refund_me", "requested_by_customer", {"order": "ord_1"})
    assert (made.currency, made.status, made.object) == ("usd", "succeeded", "refund")
    assert headers(made)["Idempotency-Key"] == "key-shape"
    assert headers(made)["Request-Id"].startswith("req_")
    assert fake.state.posted_objects[made.id] == served


def test_the_same_key_and_params_replay_the_first_answer(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    first = refund(client, "key-replay")
    again = refund(client, "key-replay")
    assert again.id == first.id
    assert "Idempotent-Replayed" not in headers(first)
    assert headers(again)["Idempotent-Replayed"] == "true"
    assert headers(again)["Original-Request"] == headers(first)["Request-Id"]
    assert again.last_response.body == first.last_response.body
    assert fake.state.created == {"key-replay": [first.id]}
    assert fake.state.stripe_posts == [("/v1/refunds", "key-replay", None, False),
                                       ("/v1/refunds", "key-replay", None, True)]


def test_the_params_in_another_order_are_the_same_params(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    first = client.raw_request("post", "/v1/refunds", charge="ch_o", amount=700,
                               idempotency_key="key-order")
    again = client.raw_request("post", "/v1/refunds", amount=700, charge="ch_o",
                               idempotency_key="key-order")
    assert json.loads(again.body)["id"] == json.loads(first.body)["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(fake.state.created["key-order"]) == 1


def test_the_same_key_with_other_params_is_an_idempotency_error(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    first = refund(client, "key-other")
    with pytest.raises(stripe.IdempotencyError) as raised:
        refund(client, "key-other", amount=501)
    assert raised.value.http_status == 400
    error = raised.value.json_body["error"]
    assert error["type"] == "idempotency_error"
    assert error["message"].startswith(
        "Keys for idempotent requests can only be used with the same parameters they were "
        "first used with. Try using a key other than 'key-other'")
    with pytest.raises(stripe.IdempotencyError):  # another path, the same form
        client.raw_request("post", "/v1/credit_notes", invoice="in_x", amount=5,
                           idempotency_key="key-other")
    with pytest.raises(stripe.IdempotencyError):  # another account: stricter than Stripe
        client.v1.refunds.create(params=REFUND,
                              options={"idempotency_key": "key-other",
                                       "stripe_account": "acct_other"})
    assert fake.state.created == {"key-other": [first.id]}
    # the first params still replay
    assert refund(client, "key-other").id == first.id


def test_a_key_in_flight_is_a_409_which_the_library_raises_as_an_api_error(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    fake.state.in_flight_seconds = 1.0
    made: list[stripe.Refund] = []
    first = threading.Thread(target=lambda: made.append(refund(client, "key-busy")))
    first.start()
    deadline = time.monotonic() + 5
    while (STRIPE_KEY, "key-busy") not in fake.state.idempotency:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(stripe.APIError) as raised:
        refund(client, "key-busy")
    assert not isinstance(raised.value, stripe.IdempotencyError)
    assert raised.value.http_status == 409
    error = raised.value.json_body["error"]
    assert (error["type"], error["code"]) == ("idempotency_error", "idempotency_key_in_use")
    assert "key-busy" in error["message"]
    first.join(10)
    assert len(made) == 1 and "Idempotent-Replayed" not in headers(made[0])
    fake.state.in_flight_seconds = 0.0
    again = refund(client, "key-busy")
    assert again.id == made[0].id and headers(again)["Idempotent-Replayed"] == "true"
    assert fake.state.created == {"key-busy": [made[0].id]}


def test_a_lost_answer_is_found_again_with_the_key(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    fake.state.drop_after_create = 1
    with pytest.raises(stripe.APIConnectionError):
        refund(client, "key-lost")
    created = fake.state.created["key-lost"]
    assert len(created) == 1  # it was made; only the answer was lost
    again = refund(client, "key-lost")
    assert again.id == created[0]
    assert headers(again)["Idempotent-Replayed"] == "true"
    assert fake.state.created == {"key-lost": [again.id]}
    assert fake.state.drop_after_create == 0


def test_a_500_after_the_request_began_is_saved_and_replayed(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    fake.state.fail_after_create = 1
    with pytest.raises(stripe.APIError) as raised:
        refund(client, "key-500")
    assert raised.value.http_status == 500
    assert raised.value.json_body["error"]["type"] == "api_error"
    assert len(fake.state.created["key-500"]) == 1
    with pytest.raises(stripe.APIError) as replayed:
        refund(client, "key-500")
    assert replayed.value.http_status == 500
    assert replayed.value.headers["Idempotent-Replayed"] == "true"
    assert replayed.value.http_body == raised.value.http_body
    assert len(fake.state.created["key-500"]) == 1  # still one object for the key
    assert fake.state.stripe_posts[-1] == ("/v1/refunds", "key-500", None, True)


def test_a_500_before_the_request_began_is_not_saved(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    fake.state.fail_before = 1
    with pytest.raises(stripe.APIError) as raised:
        refund(client, "key-early")
    assert raised.value.http_status == 500
    assert "key-early" not in fake.state.created
    assert (STRIPE_KEY, "key-early") not in fake.state.idempotency
    made = refund(client, "key-early")
    assert "Idempotent-Replayed" not in headers(made)
    assert fake.state.created == {"key-early": [made.id]}


def test_params_that_fail_validation_are_not_saved(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    with pytest.raises(stripe.InvalidRequestError) as raised:
        client.raw_request("post", "/v1/refunds", amount=5, idempotency_key="key-invalid")
    assert raised.value.http_status == 400
    assert "payment_intent or charge" in str(raised.value.user_message)
    with pytest.raises(stripe.InvalidRequestError) as unknown:
        refund(client, "key-invalid", colour="red")
    assert unknown.value.param == "colour"
    with pytest.raises(stripe.InvalidRequestError):
        refund(client, "key-invalid", reason="bored")
    made = refund(client, "key-invalid")  # the key was never taken
    assert "Idempotent-Replayed" not in headers(made)
    assert fake.state.created == {"key-invalid": [made.id]}


def test_a_key_past_its_lifetime_is_new_again(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    assert fake.state.key_lifetime_seconds == 24 * 60 * 60
    first = refund(client, "key-old")
    assert refund(client, "key-old").id == first.id  # within its lifetime: a replay
    fake.state.key_lifetime_seconds = 0.2
    time.sleep(0.3)
    later = refund(client, "key-old", amount=900)  # a new key: other params are fine
    assert later.id != first.id and later.amount == 900
    assert "Idempotent-Replayed" not in headers(later)
    assert fake.state.created == {"key-old": [first.id, later.id]}


def test_the_stripe_account_is_recorded_with_each_post(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    answer = client.raw_request("post", "/v1/refunds", charge="ch_c", amount=100,
                                idempotency_key="key-acct", stripe_account="acct_conn")
    again = client.raw_request("post", "/v1/refunds", charge="ch_c", amount=100,
                               idempotency_key="key-acct", stripe_account="acct_conn")
    assert json.loads(again.body)["id"] == json.loads(answer.body)["id"]
    assert fake.state.stripe_posts == [("/v1/refunds", "key-acct", "acct_conn", False),
                                       ("/v1/refunds", "key-acct", "acct_conn", True)]
    assert fake.state.stripe_auth[-1] == ("/v1/refunds", STRIPE_KEY, "acct_conn")


def test_a_credit_note_is_stripes_published_credit_note_with_the_params_applied(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    params = {"invoice": "in_credit", "reason": "order_change",
              "metadata": {"ticket": "t-9"}, "memo": "Sorry",
              "lines": [{"type": "custom_line_item", "unit_amount": 300, "quantity": 2,
                         "description": "Goodwill"}]}
    note = client.v1.credit_notes.create(params=params,
                                      options={"idempotency_key": "key-cn"})
    published = provider_events.published("stripe/objects/credit_note.json")
    assert list(body(note)) == list(published)
    assert note.id.startswith("cn_") and abs(note.created - time.time()) < 5
    assert (note.invoice, note.amount, note.total, note.reason, note.memo) == (
        "in_credit", 600, 600, "order_change", "Sorry")
    assert note.metadata.to_dict() == {"ticket": "t-9"}
    [line] = note.lines.data
    assert (line.type, line.amount, line.quantity, line.unit_amount, line.description) == (
        "custom_line_item", 600, 2, 300, "Goodwill")
    assert note.lines.url == f"/v1/credit_notes/{note.id}/lines"
    again = client.v1.credit_notes.create(params=params,
                                       options={"idempotency_key": "key-cn"})
    assert again.id == note.id and headers(again)["Idempotent-Replayed"] == "true"
    with pytest.raises(stripe.IdempotencyError):
        client.v1.credit_notes.create(params={**params, "reason": "duplicate"},
                                   options={"idempotency_key": "key-cn"})
    assert fake.state.created == {"key-cn": [note.id]}


def test_a_credit_note_for_a_served_invoice_takes_its_customer_and_line_amounts(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    invoice = provider_events.stripe_object("invoice", id="in_served", customer="cus_served",
                                            amount_paid=2500, currency="eur", status="paid")
    fake.state.stripe_objects[(None, "/v1/invoices/in_served")] = invoice
    billed = invoice["lines"]["data"][0]["id"]
    note = client.v1.credit_notes.create(
        params={"invoice": "in_served",
                "lines": [{"type": "invoice_line_item", "invoice_line_item": billed,
                           "quantity": 1}]},
        options={"idempotency_key": "key-cn-served"})
    assert (note.customer, note.currency, note.amount) == ("cus_served", "eur", 2500)
    assert note.lines.data[0].invoice_line_item == billed
    by_amount = client.raw_request("post", "/v1/credit_notes", invoice="in_served",
                                   amount=1200, idempotency_key="key-cn-amount")
    served = json.loads(by_amount.body)
    assert (served["amount"], served["lines"]["data"]) == (1200, [])
    with pytest.raises(stripe.InvalidRequestError) as raised:
        client.raw_request("post", "/v1/credit_notes", amount=5, idempotency_key="key-cn-bad")
    assert raised.value.param == "invoice"
    assert fake.state.created == {"key-cn-served": [note.id],
                                  "key-cn-amount": [served["id"]]}


def test_posts_elsewhere_answer_as_before(fake: FakeProviderApis,
                                          client: stripe.StripeClient) -> None:
    with pytest.raises(stripe.InvalidRequestError) as raised:
        client.raw_request("post", "/v1/customers", email="a@example.com")
    assert raised.value.http_status == 404
    assert requests.post(f"{fake.url}/events", data="x", timeout=5).status_code == 501
    bad = stripe.StripeClient("sk_test_wrong", base_addresses={"api": fake.url},
                              max_network_retries=0)
    with pytest.raises(stripe.AuthenticationError):
        bad.v1.refunds.create(params=REFUND)
    assert fake.state.created == {}


def test_get_faults_leave_posts_alone_and_post_faults_leave_gets_alone(
        fake: FakeProviderApis, client: stripe.StripeClient) -> None:
    fake.state.fail_next = 1
    made = refund(client, "key-apart")
    assert fake.state.fail_next == 1
    with pytest.raises(stripe.APIError):
        client.raw_request("get", "/v1/events", limit=1)
    fake.state.fail_before, fake.state.fail_after_create = 1, 1
    fake.state.drop_after_create = 1
    listed = client.raw_request("get", "/v1/events", limit=1)
    assert json.loads(listed.body)["data"] == []
    assert (fake.state.fail_before, fake.state.fail_after_create,
            fake.state.drop_after_create) == (1, 1, 1)
    assert fake.state.created == {"key-apart": [made.id]}
