"""Who may look, and proof that a change came from the console's own form.

Every request needs HTTP Basic credentials, compared in constant time, before anything of
its body is read (`Guard.refusal` looks at the headers alone). A client that failed
FAILURES_ALLOWED times within FAILURE_WINDOW_SECONDS is answered 429 until the window has
passed (per console process), whatever it sends, the right password included: were the
right one let through, the 429 would answer every wrong guess and the 200 the right one,
at full speed, and the limit would stop no guessing. Every failure is logged with the
address. The client is REMOTE_ADDR: the socket's peer, or behind TRUSTED_PROXIES the
entry the proxies appended to X-Forwarded-For (`webhooks console` applies werkzeug's
ProxyFix, as the ingest; a host app mounting the blueprint applies its own), so a lockout
holds the failing client alone, never every operator behind one proxy. An IPv6 client is
its /64 (one host's allocation, where it can pick any address), an IPv4 one its address.

Every POST needs a CSRF token: an itsdangerous signature of the user name, keyed by
CONSOLE_SECRET_KEY, or else by a key derived from CONSOLE_PASSWORD with scrypt (slow on
purpose: a token seen by someone is then no cheap offline test of password guesses), so
every console process (and every restart) accepts every other's tokens, and a password
change voids them all. No session or cookie is involved: a page from another site can
make the browser send Basic credentials, but cannot read a token.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import threading
import time
from collections import OrderedDict

from flask import Response
from itsdangerous import BadSignature, URLSafeTimedSerializer
from werkzeug.wrappers import Request

from webhooks.console.settings import ConsoleSettings

log = logging.getLogger(__name__)

REALM = "webhooks console"
TOKEN_FIELD = "csrf_token"  # noqa: S105 - a form field's name, not a secret
TOKEN_MAX_AGE = 12 * 3600  # a page left open over a working day still submits
_TOKEN_SALT = "webhooks-console-csrf"  # noqa: S105 - a namespace, not a secret
_KDF_SALT = b"webhooks console: CSRF signing key"
FAILURES_ALLOWED = 5
FAILURE_WINDOW_SECONDS = 60.0
_TRACKED_ADDRESSES = 10_000  # the failure records kept; the oldest are forgotten first
IPV6_CLIENT_PREFIX = 64  # the addresses one IPv6 client may use as it pleases


def signing_key(settings: ConsoleSettings) -> str:
    """The CSRF tokens' key: CONSOLE_SECRET_KEY, or scrypt of the password."""
    if settings.secret_key:
        return settings.secret_key
    assert settings.password is not None
    return hashlib.scrypt(settings.password.encode(), salt=_KDF_SALT, n=2**14, r=8, p=1,
                          maxmem=64 * 1024 * 1024).hex()


def client_key(address: str) -> str:
    """The client an address stands for, in the failure records: an IPv4 address itself
    (an IPv4-mapped IPv6 address, what a dual-stack socket reports, included), an IPv6
    address its /64; text that is no address, as it is."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, IPV6_CLIENT_PREFIX), strict=False))
    return str(parsed)


class Failures:
    """Failed logins per client (client_key), in a sliding window."""

    def __init__(self) -> None:
        self._seen: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def blocked_for(self, address: str) -> float:
        """Seconds until `address` may try again (0: now)."""
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self._seen.get(address, []) if now - t < FAILURE_WINDOW_SECONDS]
            if len(recent) < FAILURES_ALLOWED:
                return 0.0
            return FAILURE_WINDOW_SECONDS - (now - recent[-FAILURES_ALLOWED])

    def add(self, address: str) -> int:
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self._seen.pop(address, []) if now - t < FAILURE_WINDOW_SECONDS]
            self._seen[address] = [*recent, now][-FAILURES_ALLOWED:]
            while len(self._seen) > _TRACKED_ADDRESSES:
                self._seen.popitem(last=False)
            return len(self._seen[address])


class Guard:
    """Basic auth and CSRF tokens for one console configuration."""

    def __init__(self, settings: ConsoleSettings) -> None:
        settings.require_password()
        assert settings.password is not None
        self.user = settings.user
        self._password = settings.password.encode()
        self._signer = URLSafeTimedSerializer(signing_key(settings), salt=_TOKEN_SALT)
        self.failures = Failures()

    def refusal(self, request: Request) -> Response | None:
        """None for a request with the right credentials from a client that is not held
        back; else the 429 (a client past its failures, its credentials not even
        compared) or the 401 (the failure counted and logged). Reads the headers alone,
        never the body: ask it before reading one."""
        address = request.remote_addr or "unknown"
        client = client_key(address)
        wait = self.failures.blocked_for(client)
        if wait > 0:
            return too_many_failures(wait)
        given = request.authorization
        if given is not None and given.type == "basic":
            # Both compared every time, so the timing says nothing of which one was wrong.
            user_ok = hmac.compare_digest((given.username or "").encode(), self.user.encode())
            password_ok = hmac.compare_digest((given.password or "").encode(), self._password)
            if user_ok & password_ok:
                return None
            count = self.failures.add(client)
            log.warning("console login failed", extra={
                "address": address, "client": client, "user": given.username,
                "failures_in_window": count})
        return challenge()

    def token(self) -> str:
        return self._signer.dumps(self.user)

    def valid_token(self, token: str | None) -> bool:
        if not token:
            return False
        try:
            user = self._signer.loads(token, max_age=TOKEN_MAX_AGE)
        except BadSignature:  # SignatureExpired included
            return False
        return isinstance(user, str) and hmac.compare_digest(user.encode(), self.user.encode())


def challenge() -> Response:
    return Response("Authentication required.\n", 401, {
        "WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"',
        "Content-Type": "text/plain; charset=utf-8",
    })


def too_many_failures(wait: float) -> Response:
    return Response("Too many failed logins from this address: try again later.\n", 429, {
        "Retry-After": str(max(1, round(wait))), "Content-Type": "text/plain; charset=utf-8"})
