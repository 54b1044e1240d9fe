"""Client-side deadlines for statements the server will not time out.

Postgres applies statement_timeout to a statement but not to its commit's wait for a
synchronous standby: with a standby that stops answering, a commit waits for good. A
cancel request (what pg_cancel_backend sends) does end that wait, so a watchdog thread
sends one to every connection whose statement outlives its deadline.

    token = DEADLINES.arm(driver_connection, seconds)
    ... run the statement ...
    if DEADLINES.disarm(token): ...  # the deadline passed and the statement was cancelled

A cancel the server receives after the statement ended hits whatever the connection runs
next, if anything: that statement fails as cancelled, and its caller answers as for any
database error (the ingest: 503, and the provider retries). Only a statement already
past its deadline can cause this.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

TICK_SECONDS = 0.25  # how late past its deadline a statement may be cancelled
CANCEL_TIMEOUT_SECONDS = 2.0  # the cancel request's own connection, to a server that may be gone


class Deadlines:
    def __init__(self) -> None:
        self._armed: dict[int, tuple[float, Any]] = {}
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        self._watchdog_pid = 0  # the process whose watchdog runs (a fork has none)

    def arm(self, connection: Any, seconds: float) -> int:
        """Cancel connection's statement (a psycopg connection) if it still runs in
        `seconds`; the token to disarm it with."""
        if self._watchdog_pid != os.getpid():
            self._start_watchdog()
        token = next(self._tokens)
        self._armed[token] = (time.monotonic() + seconds, connection)
        return token

    def disarm(self, token: int) -> bool:
        """Forget the token; True when its deadline passed and a cancel was sent."""
        with self._lock:  # the watchdog takes a token under it: one of the two has it
            return self._armed.pop(token, None) is None

    def _start_watchdog(self) -> None:
        with self._lock:
            if self._watchdog_pid == os.getpid():
                return
            self._armed.clear()  # a parent's, inherited by a fork
            threading.Thread(target=self._watch, name="statement-deadlines", daemon=True).start()
            self._watchdog_pid = os.getpid()

    def _watch(self) -> None:
        while True:
            time.sleep(TICK_SECONDS)
            now = time.monotonic()
            for token, (deadline, connection) in list(self._armed.items()):
                if deadline <= now and self._take(token):
                    self._cancel(connection)

    def _take(self, token: int) -> bool:
        with self._lock:
            if self._armed.pop(token, None) is None:
                return False  # disarmed meanwhile
            return True

    @staticmethod
    def _cancel(connection: Any) -> None:
        try:
            connection.cancel_safe(timeout=CANCEL_TIMEOUT_SECONDS)
        except Exception as error:  # the server may be gone: the connection's own error follows
            log.warning("cancelling a statement past its deadline failed: %s", error)


DEADLINES = Deadlines()
