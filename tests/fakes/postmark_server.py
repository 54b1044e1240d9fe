"""A fake Postmark API over real HTTP, for integration and acceptance tests.

It speaks the parts of Postmark the dispatcher uses, with Postmark's JSON shapes:

    POST /email              one message    -> 200 {MessageID, ErrorCode: 0, ...} or 422
    POST /email/batch        many messages  -> 200 [one result per message, in order]
    GET  /messages/outbound  search (count, offset, recipient, metadata_<name>=<value>)
                             -> {TotalCount, Messages: [{MessageID, Metadata, ...}]}

and checks X-Postmark-Server-Token. Every accepted message is recorded with its
Metadata, so a test can count messages per idempotency key.

Fault modes (counters are consumed one per request; a batch is one request):

    fail_first          the next N API requests (sends and searches): 500, nothing recorded
    error_after_accept  the next N sends: recorded, then 500
    drop_after_accept   the next N sends: recorded, then the connection is closed unanswered
    slow_after_accept   the next N sends: recorded, then answered after `delay` seconds
    invalid_pattern     a To containing it: ErrorCode 300 (invalid address), never recorded
    inactive_pattern    a To containing it: ErrorCode 406 (inactive recipient)
    batch_limit         a batch with more messages: 422 ErrorCode 410, as Postmark's 500

In-process: `with FakePostmark() as fake: ... fake.set_mode(fail_first=2)`.
As a process: `python -m tests.fakes.postmark_server --port 0 --mode fail_first=2` prints
its port on the first line; another process controls it over HTTP:

    POST /_control/mode      JSON object of modes to set; answers the current modes
    POST /_control/reset     forget messages and counters, restore default modes
    GET  /_control/messages  {total, by_key: {key: count}, requests: {route: count},
                              messages: [...]}
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

DEFAULT_TOKEN = "fake-postmark-token"
METADATA_KEY = "idempotency_key"


@dataclass
class Modes:
    fail_first: int = 0
    error_after_accept: int = 0
    drop_after_accept: int = 0
    slow_after_accept: int = 0
    delay: float = 2.0
    invalid_pattern: str = "invalid"
    inactive_pattern: str = "inactive"
    batch_limit: int = 500


class Rejected(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class State:
    """Recorded messages, request counts and modes, shared by the handler threads."""

    def __init__(self, token: str, modes: Modes) -> None:
        self.token = token
        self.modes = modes
        self.messages: list[dict[str, Any]] = []
        self.requests: Counter[str] = Counter()
        self.lock = threading.Lock()

    def take(self, mode: str) -> bool:
        """Consume one unit of a counted fault mode; True if it applies to this request."""
        with self.lock:
            left = getattr(self.modes, mode)
            if left > 0:
                setattr(self.modes, mode, left - 1)
            return bool(left > 0)

    def accept(self, message: dict[str, Any]) -> dict[str, Any]:
        """Validate and record one message; its Postmark result."""
        to = str(message.get("To") or "")
        if not to or not message.get("From"):
            raise Rejected(300, "Invalid email request: From and To are required.")
        if self.modes.invalid_pattern and self.modes.invalid_pattern in to:
            raise Rejected(300, f"Error parsing 'To': Illegal email address '{to}'.")
        if self.modes.inactive_pattern and self.modes.inactive_pattern in to:
            raise Rejected(406, "You tried to send to recipient(s) that have been marked as "
                                "inactive.")
        now = datetime.now(UTC).isoformat()
        record = {**message, "MessageID": str(uuid.uuid4()), "ReceivedAt": now}
        with self.lock:
            self.messages.append(record)
        return {"To": to, "SubmittedAt": now, "MessageID": record["MessageID"],
                "ErrorCode": 0, "Message": "OK"}

    def search(self, params: dict[str, str]) -> dict[str, Any]:
        wanted = {k[len("metadata_"):]: v for k, v in params.items() if k.startswith("metadata_")}
        with self.lock:
            found = [m for m in self.messages
                     if all((m.get("Metadata") or {}).get(k) == v for k, v in wanted.items())
                     and params.get("recipient", m["To"]) == m["To"]]
        count, offset = int(params["count"]), int(params["offset"])
        return {"TotalCount": len(found),
                "Messages": [_summary(m) for m in found[offset:offset + count]]}

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            keys = Counter((m.get("Metadata") or {}).get(METADATA_KEY) for m in self.messages)
            return {"total": len(self.messages), "by_key": dict(keys),
                    "requests": dict(self.requests), "messages": list(self.messages)}

    def reset(self, modes: Modes) -> None:
        with self.lock:
            self.messages.clear()
            self.requests.clear()
            self.modes = modes


def _summary(message: dict[str, Any]) -> dict[str, Any]:
    """A message as Postmark's outbound search lists it."""
    return {"MessageID": message["MessageID"], "MessageStream": message.get("MessageStream"),
            "To": [{"Email": message["To"], "Name": None}], "Recipients": [message["To"]],
            "From": message["From"], "Subject": message.get("Subject"), "Tag": "",
            "ReceivedAt": message["ReceivedAt"], "Status": "Sent", "Attachments": [],
            "TrackOpens": False, "TrackLinks": "None", "Sandboxed": False,
            "Metadata": message.get("Metadata") or {}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Postmark: the client reuses connections
    disable_nagle_algorithm = True  # headers and body go out in two writes
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests read counts from the control API

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        parts = urlsplit(self.path)
        params = dict(parse_qsl(parts.query))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        route = f"{method} {parts.path.rstrip('/') or '/'}"
        try:
            if parts.path.startswith("/_control/"):
                self._control(route, body)
            else:
                self._api(route, params, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a timeout): nothing to answer

    def _api(self, route: str, params: dict[str, str], body: bytes) -> None:
        state = self.server.state
        with state.lock:
            state.requests[route] += 1
        if self.headers.get("X-Postmark-Server-Token") != state.token:
            return self._json(401, {"ErrorCode": 10, "Message": "Request does not contain a "
                                                                "valid Server token."})
        if state.take("fail_first"):
            return self._json(500, {"ErrorCode": 500, "Message": "Internal server error."})
        if route == "GET /messages/outbound":
            return self._search(params)
        try:
            data = json.loads(body or b"null")
        except ValueError:
            return self._json(422, {"ErrorCode": 402, "Message": "Invalid JSON."})
        if route == "POST /email":
            return self._send_one(data)
        if route == "POST /email/batch":
            return self._send_batch(data)
        return self._json(404, {"ErrorCode": 404, "Message": f"No route {route}."})

    def _search(self, params: dict[str, str]) -> None:
        if "count" not in params or "offset" not in params:
            return self._json(422, {"ErrorCode": 1, "Message": "count and offset are required."})
        self._json(200, self.server.state.search(params))

    def _send_one(self, message: Any) -> None:
        try:
            result = self.server.state.accept(message if isinstance(message, dict) else {})
        except Rejected as error:
            return self._json(422, {"ErrorCode": error.code, "Message": str(error)})
        self._answer_accepted(result)

    def _send_batch(self, messages: Any) -> None:
        state = self.server.state
        if not isinstance(messages, list) or len(messages) > state.modes.batch_limit:
            return self._json(422, {"ErrorCode": 410, "Message": "Too many batch messages."})
        results = []
        for message in messages:
            try:
                results.append(state.accept(message if isinstance(message, dict) else {}))
            except Rejected as error:
                results.append({"ErrorCode": error.code, "Message": str(error)})
        self._answer_accepted(results)

    def _answer_accepted(self, payload: Any) -> None:
        """The messages are recorded; now answer, or fail to, as the modes say."""
        state = self.server.state
        if state.take("drop_after_accept"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if state.take("error_after_accept"):
            return self._json(500, {"ErrorCode": 500, "Message": "Internal server error."})
        if state.take("slow_after_accept"):
            time.sleep(state.modes.delay)
        return self._json(200, payload)

    def _control(self, route: str, body: bytes) -> None:
        state = self.server.state
        if route == "POST /_control/mode":
            with state.lock:
                for name, value in json.loads(body or b"{}").items():
                    kind = type(getattr(state.modes, name))
                    setattr(state.modes, name, kind(value))
            return self._json(200, asdict(state.modes))
        if route == "POST /_control/reset":
            state.reset(Modes())
            return self._json(200, {})
        if route == "GET /_control/messages":
            return self._json(200, state.snapshot())
        return self._json(404, {"error": f"no control route {route}"})

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    state: State

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is part of a test, not a fault of the fake.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakePostmark:
    """The fake on 127.0.0.1 in a background thread."""

    def __init__(self, port: int = 0, token: str = DEFAULT_TOKEN, **modes: Any) -> None:
        self.server = Server(("127.0.0.1", port), Handler)
        self.server.state = State(token, Modes(**modes))
        self.token = token
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                        daemon=True, name="fake-postmark")

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakePostmark:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakePostmark:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def set_mode(self, **modes: Any) -> None:
        with self.server.state.lock:
            for name, value in modes.items():
                setattr(self.server.state.modes, name, value)

    def snapshot(self) -> dict[str, Any]:
        return self.server.state.snapshot()

    def by_key(self) -> dict[str, int]:
        return dict(self.snapshot()["by_key"])

    def requests(self, route: str) -> int:
        return int(self.snapshot()["requests"].get(route, 0))


def _parse_mode(raw: str) -> tuple[str, Any]:
    name, _, value = raw.partition("=")
    kinds = {f.name: type(getattr(Modes(), f.name)) for f in fields(Modes)}
    if name not in kinds:
        raise argparse.ArgumentTypeError(f"unknown mode {name!r}; one of {', '.join(kinds)}")
    return name, kinds[name](value)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake Postmark API for tests.")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    parser.add_argument("--mode", type=_parse_mode, action="append", default=[],
                        metavar="NAME=VALUE", help="a fault mode; repeatable")
    args = parser.parse_args(argv)
    fake = FakePostmark(args.port, args.token, **dict(args.mode))
    print(fake.port, flush=True)
    try:
        fake.server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        fake.server.server_close()


if __name__ == "__main__":
    main()
