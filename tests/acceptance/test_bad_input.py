"""Guarantee 5 (docs/guarantees.md): no bad input (signature, header, body, size, encoding)
produces a 5xx or a written row, checked by fuzzing the running `web` process over HTTP for
every provider.

Every generated request is bad in at least one way, chosen first (the `flaw`), with
everything else random or correct: a request signed with the right secret reaches the
code after the signature check (parsing, ids, storage) with hostile content. After each
request the tables must still be empty.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.acceptance.harness import System
from tests.acceptance.signing import HEADER_IDS, PROVIDERS, SECRETS, delivery_headers

EXAMPLES = 420
TIMESTAMPED = ("stripe", "paddle", "slack", "standard")
BODY_ID_FIELD = {"stripe": "id", "paddle": "event_id", "slack": "event_id"}
MAX_BODY = 65536  # the harness's MAX_BODY_BYTES

header_text = st.text(st.characters(min_codepoint=32, max_codepoint=255,
                                    blacklist_characters="\x7f"), max_size=80)
# What an HTTP client can send at all: no CR or LF, no leading whitespace.
header_value = st.one_of(header_text.map(str.lstrip), st.binary(max_size=40).filter(
    lambda b: b"\r" not in b and b"\n" not in b).map(bytes.lstrip))
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                        st.text(max_size=30))
json_value = st.recursive(json_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12)
bad_ids = st.one_of(st.none(), st.just(""), st.just("   "), st.integers(), st.lists(
    st.text(max_size=3), max_size=2), st.text(min_size=256, max_size=300),
    st.text(max_size=10).map(lambda t: t + "\x00"))
# Bodies no JSON parser of ours should turn into an event object.
bad_bodies = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"", b"null", b"[]", b"42", b'"text"', b"{", b"{}}", b"\xff\xfe{}",
                     b"\xef\xbb\xbf{}", "{}".encode("utf-16"), b"[" * 60_000,
                     b'{"id": "evt_1", "type": "x", "data": ' + b"[" * 30_000 + b"}",
                     # well-formed, and nested deeper than any parser of ours goes
                     b'{"id": "evt_1", "type": "x", "data": ' + b"[" * 5_000 + b"]" * 5_000
                     + b"}"]),
    json_value.filter(lambda v: not isinstance(v, dict)).map(lambda v: json.dumps(v).encode()),
)
# JSON objects whose content Postgres jsonb refuses to store, or that Postgres and Python
# would read as different numbers (shared/payloads.py).
unstorable = st.sampled_from(['"\\u0000"', '"a\\u0000b"', '"\\ud800"', '"\\udfff x"', "NaN",
                              "-Infinity", "Infinity", "1e5000", "-1e400", "1e-400", "1e308",
                              "9" * 5000, "[1e999]"])


@st.composite
def bad_request(draw: st.DrawFn) -> Case:
    provider = draw(st.sampled_from(PROVIDERS))
    flaws = ["unsigned", "wrong_secret", "bad_body", "bad_id", "unstorable", "too_large",
             "unknown_provider"]
    if provider in TIMESTAMPED:
        flaws.append("bad_timestamp")
    flaw = draw(st.sampled_from(flaws))
    event_id = f"evt_fuzz_{draw(st.integers(0, 10**9))}"
    event: dict[str, Any] = draw(st.dictionaries(st.text(max_size=8), json_value, max_size=3))
    event.update({BODY_ID_FIELD.get(provider, "id"): event_id, "type": "fuzz.event"})
    secret, timestamp = SECRETS[provider], int(time.time())
    body = json.dumps(event).encode()
    status = {400}
    if flaw == "unsigned":
        secret = "whsec_dW5zaWduZWQ="  # a placeholder: these signature headers are mangled
    elif flaw == "wrong_secret":
        secret = draw(st.sampled_from([s for p, s in SECRETS.items() if p != provider]))
        if provider == "standard":
            secret = "whsec_" + base64.b64encode(secret.encode()).decode()
    elif flaw == "bad_timestamp":  # drawn as an offset: the strategy must not read the clock
        timestamp += draw(st.integers(310, 10**15)) * draw(st.sampled_from([1, -1]))
    elif flaw == "bad_body":
        body = draw(bad_bodies)
    elif flaw == "bad_id":
        if provider in HEADER_IDS:
            event_id = draw(st.sampled_from(["", "x" * 256, "evt\x00"]))
        else:
            event[BODY_ID_FIELD[provider]] = draw(bad_ids)
            body = json.dumps(event).encode()
    elif flaw == "unstorable":
        value = draw(unstorable)
        body = body[:-1] + f', "hostile": {value}}}'.encode()
    elif flaw == "too_large":
        body = body[:-1] + b', "pad": "' + b"x" * (MAX_BODY + draw(st.integers(0, 5000))) + b'"}'
        status = {413}
    elif flaw == "unknown_provider":
        status = {404}
    headers: dict[str, Any] = delivery_headers(provider, body, event_id, "fuzz.event",
                                               secret, timestamp=timestamp)
    if flaw == "unsigned":
        for name in draw(st.sets(st.sampled_from(sorted(headers)), max_size=len(headers))):
            if draw(st.booleans()):
                del headers[name]
            else:
                headers[name] = draw(header_value)  # type: ignore[assignment]
    if status == {400}:  # junk headers: the HTTP server itself may answer 400 for them
        headers.update(draw(st.dictionaries(
            st.from_regex(r"X-Fuzz-[A-Za-z0-9]{1,8}", fullmatch=True), header_value,
            max_size=3)))
    path = provider
    if flaw == "unknown_provider":
        path = draw(st.sampled_from(["unknown", "Stripe", "stripe2", "%00", "..", "x" * 300]))
    return Case(flaw, provider, path, headers, body,
                chunked=flaw == "too_large" and draw(st.booleans()), status=status)


class Case:
    """One bad request (a plain class: Hypothesis prints it with __repr__)."""

    def __init__(self, flaw: str, provider: str, path: str, headers: dict[str, Any],
                 body: bytes, *, chunked: bool, status: set[int]) -> None:
        self.flaw, self.provider, self.path, self.headers = flaw, provider, path, headers
        self.body, self.chunked, self.status = body, chunked, status

    def __repr__(self) -> str:  # a failing example stays readable: bodies can be 70 kB
        body = self.body if len(self.body) <= 300 else self.body[:300] + b"..."
        return (f"Case({self.flaw}, {self.provider}, /webhooks/{self.path[:40]}, "
                f"{self.headers}, body[{len(self.body)}]={body!r}, chunked={self.chunked})")


def post(session: requests.Session, system: System, path: str, body: bytes,
         headers: dict[str, Any], chunked: bool = False) -> requests.Response:
    """POST body, with Content-Length or (chunked) as a stream of 8 kB chunks."""
    data: Any = iter([body[i:i + 8192] for i in range(0, len(body), 8192)]) if chunked \
        else body
    return session.post(f"{system.base_url}/webhooks/{path}", data=data, headers=headers,
                        timeout=30)


def written(system: System) -> int:
    return int(system.scalar("SELECT (SELECT count(*) FROM webhook_events) + "
                             "(SELECT count(*) FROM jobs) + (SELECT count(*) FROM outbox)"))


def test_bad_input_never_gets_a_5xx_or_a_row(fresh: System) -> None:
    session = requests.Session()
    seen: dict[str, dict[int, int]] = {}

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(bad_request())
    def check(case: Case) -> None:
        response = post(session, fresh, case.path, case.body, case.headers, case.chunked)
        tally = seen.setdefault(case.flaw, {})
        tally[response.status_code] = tally.get(response.status_code, 0) + 1
        assert response.status_code < 500, (response.status_code, response.text[:300])
        assert response.status_code in case.status, (response.status_code,
                                                     response.text[:300])
        assert written(fresh) == 0

    check()
    # Requests like those, made valid, are accepted: the flaws are what was refused. At
    # the size limit exactly a body is accepted, chunked or not; one byte over, 413.
    accepted = 0
    for provider in PROVIDERS:
        for size, chunked in ((0, False), (MAX_BODY, False), (MAX_BODY, True)):
            event_id = f"evt_ok_{provider}_{size}_{chunked}"
            body = sized_event(provider, event_id, size)
            headers = delivery_headers(provider, body, event_id, "fuzz.event")
            response = post(session, fresh, provider, body, headers, chunked)
            assert response.status_code == 200, (provider, size, chunked, response.text)
            accepted += 1
            if not size:
                continue
            over = body[:-2] + b'x"}'
            headers = delivery_headers(provider, over, event_id + "_over", "fuzz.event")
            response = post(session, fresh, provider, over, headers, chunked)
            assert response.status_code == 413, (provider, chunked, response.text)
    assert int(fresh.scalar("SELECT count(*) FROM webhook_events")) == accepted
    print(f"\nbad input: {sum(sum(t.values()) for t in seen.values())} requests over "
          f"{len(PROVIDERS)} providers, statuses per flaw {seen}; then {accepted} valid "
          f"deliveries (small, exactly {MAX_BODY} bytes, chunked): 200 and one row each, "
          f"and one byte over the limit: 413")


def sized_event(provider: str, event_id: str, size: int) -> bytes:
    """A valid event body of exactly `size` bytes (or a small one for size 0)."""
    event = {BODY_ID_FIELD.get(provider, "id"): event_id, "type": "fuzz.event",
             "event": {"type": "fuzz.event"}, "pad": ""}
    body = json.dumps(event).encode()
    if size:
        body = body[:-2] + b"x" * (size - len(body)) + b'"}'
    assert not size or len(body) == size
    return body
