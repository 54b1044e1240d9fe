"""A stop asked of the whole process group stays graceful.

Heroku, systemd (KillMode=control-group, its default) and `kill -TERM -PGID` send SIGTERM
to every process of the worker at once. Each Dramatiq worker process then receives it
twice within milliseconds: its own, and the one Dramatiq's main process forwards. Dramatiq
takes a second SIGTERM as "kill now", so the worker process exits at once and the batch in
flight rolls back (nothing is lost, but the work is done again, on every deploy) instead of
finishing within --worker-shutdown-timeout.

Here a SIGTERM that arrives within DUPLICATE_SECONDS of the first is taken for the same
stop; one sent later still kills, as Dramatiq intends.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType

DUPLICATE_SECONDS = 2.0


def tolerate_group_sigterm() -> None:
    """Wrap this process's SIGTERM handler (Dramatiq's, in a worker process). Only from the
    main thread, where handlers are set; a process without a handler of its own is left
    alone."""
    if threading.current_thread() is not threading.main_thread():
        return
    handler = signal.getsignal(signal.SIGTERM)
    if not callable(handler):
        return
    first: list[float] = []

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if first and now - first[0] < DUPLICATE_SECONDS:
            return  # the same stop, delivered twice
        first.append(now)
        handler(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)
