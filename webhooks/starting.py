"""A Procfile process's first instant: SIGTERM ends it with status 0 until the process's
own handler takes over (granian's in `web` and `console`, Dramatiq's in `worker`, the
clock's in webhooks/clock/schedule.py).

The `webhooks` command imports this module before anything else (webhooks/cli.py), and
the `webhooks` package loads its public names only when asked for them, so a process has
no handler only while the interpreter itself starts. Without one, SIGTERM ends a process
with status 143; as PID 1 of a container, which gets no default action, it is dropped,
and the process starts and runs until the platform kills it at the end of its grace
period (status 137). Nothing is served yet when this handler runs, so nothing is cut
short.

Standard library only, and little of it: it runs before the command's imports.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, NoReturn

# The Procfile's long-running processes: each exits 0 on SIGTERM at any moment of its life
# (docs/processes.md).
SERVING = ("web", "worker", "clock", "console")
Handler = Callable[[int, FrameType | None], Any] | int | None


def serving(argv: Sequence[str]) -> bool:
    """The command line is `webhooks <process>` (the installed script, or `python -m
    webhooks`) for one of SERVING."""
    program = os.path.basename(argv[0]) if argv else ""
    return program in ("webhooks", "__main__.py") and len(argv) > 1 and argv[1] in SERVING


def take_charge() -> Handler:
    """SIGTERM ends the process with status 0 (leave) from now until another handler
    replaces this one; the handler it replaces is returned. Only from the main thread,
    where handlers are set."""
    if threading.current_thread() is not threading.main_thread():
        return signal.getsignal(signal.SIGTERM)
    return signal.signal(signal.SIGTERM, _stop)


def _stop(signum: int, frame: FrameType | None) -> None:
    leave()


def leave() -> NoReturn:
    """Exit 0 now, from a signal handler, while nothing is being served. Not SystemExit: a
    handler runs between any two bytecodes of the main thread, also inside a weakref
    callback or a __del__ (importlib's module locks have one), where Python prints an
    exception and carries on, and the process would start after all and run until it is
    killed. Only what is written is flushed: nothing else is left to finish."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: S110 - a write the signal interrupted: exit regardless
            pass
    os._exit(0)


if serving(sys.argv):
    take_charge()
