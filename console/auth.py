"""Who may look, and proof that a change came from the console's own form.

Every request needs HTTP Basic credentials, compared in constant time. Every POST needs a
CSRF token: an itsdangerous signature of the user name, keyed by a secret derived from
CONSOLE_PASSWORD, so every console process (and every restart) accepts every other's
tokens, and a password change voids them all. No session or cookie is involved: a page
from another site can make the browser send Basic credentials, but cannot read a token.
"""

from __future__ import annotations

import hashlib
import hmac

from flask import Response, request
from itsdangerous import BadSignature, URLSafeTimedSerializer

from console.settings import ConsoleSettings

REALM = "webhooks console"
TOKEN_FIELD = "csrf_token"  # noqa: S105 - a form field's name, not a secret
TOKEN_MAX_AGE = 12 * 3600  # a page left open over a working day still submits
_TOKEN_SALT = "webhooks-console-csrf"  # noqa: S105 - a namespace, not a secret


class Guard:
    """Basic auth and CSRF tokens for one console configuration."""

    def __init__(self, settings: ConsoleSettings) -> None:
        settings.require_password()
        assert settings.password is not None
        self.user = settings.user
        self._password = settings.password.encode()
        key = hmac.new(self._password, b"webhooks console: CSRF signing key", hashlib.sha256)
        self._signer = URLSafeTimedSerializer(key.hexdigest(), salt=_TOKEN_SALT)

    def authenticated(self) -> bool:
        given = request.authorization
        if given is None or given.type != "basic":
            return False
        # Both compared every time, so the timing says nothing of which one was wrong.
        user_ok = hmac.compare_digest((given.username or "").encode(), self.user.encode())
        password_ok = hmac.compare_digest((given.password or "").encode(), self._password)
        return user_ok & password_ok

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
