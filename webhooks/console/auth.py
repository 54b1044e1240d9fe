"""Who may look, and proof that a change came from the console's own form.

Every request needs HTTP Basic credentials, compared in constant time. A client address
that failed FAILURES_ALLOWED times within FAILURE_WINDOW_SECONDS is answered 429 until
the window has passed (per console process), and every failure is logged with the
address. Every POST needs a CSRF token: an itsdangerous signature of the user name, keyed
by CONSOLE_SECRET_KEY, or else by a key derived from CONSOLE_PASSWORD with scrypt (slow on
purpose: a token seen by someone is then no cheap offline test of password guesses), so
every console process (and every restart) accepts every other's tokens, and a password
change voids them all. No session or cookie is involved: a page from another site can
make the browser send Basic credentials, but cannot read a token.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections import OrderedDict

from flask import Response, request
from itsdangerous import BadSignature, URLSafeTimedSerializer

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


def signing_key(settings: ConsoleSettings) -> str:
    """The CSRF tokens' key: CONSOLE_SECRET_KEY, or scrypt of the password."""
    if settings.secret_key:
        return settings.secret_key
    assert settings.password is not None
    return hashlib.scrypt(settings.password.encode(), salt=_KDF_SALT, n=2**14, r=8, p=1,
                          maxmem=64 * 1024 * 1024).hex()


class Failures:
    """Failed logins per client address, in a sliding window."""

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

    def authenticated(self) -> bool:
        given = request.authorization
        if given is None or given.type != "basic":
            return False
        # Both compared every time, so the timing says nothing of which one was wrong.
        user_ok = hmac.compare_digest((given.username or "").encode(), self.user.encode())
        password_ok = hmac.compare_digest((given.password or "").encode(), self._password)
        if user_ok & password_ok:
            return True
        address = request.remote_addr or "unknown"
        count = self.failures.add(address)
        log.warning("console login failed", extra={"address": address, "user": given.username,
                                                   "failures_in_window": count})
        return False

    def blocked_for(self) -> float:
        """Seconds this client must wait after too many failed logins (0: none)."""
        return self.failures.blocked_for(request.remote_addr or "unknown")

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
