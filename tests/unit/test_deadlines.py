"""webhooks.shared.deadlines: a statement past its deadline is cancelled once; one that ends in
time never is."""

from __future__ import annotations

import threading
import time

from webhooks.shared.deadlines import TICK_SECONDS, Deadlines


class Connection:
    def __init__(self) -> None:
        self.cancels = 0
        self.cancelled = threading.Event()

    def cancel_safe(self, timeout: float) -> None:
        self.cancels += 1
        self.cancelled.set()


def test_a_statement_past_its_deadline_is_cancelled_once() -> None:
    deadlines, connection = Deadlines(), Connection()
    token = deadlines.arm(connection, 0.05)
    assert connection.cancelled.wait(5 * TICK_SECONDS + 1)
    time.sleep(2 * TICK_SECONDS)
    assert deadlines.disarm(token) is True
    assert connection.cancels == 1


def test_a_statement_that_ends_in_time_is_never_cancelled() -> None:
    deadlines, connection = Deadlines(), Connection()
    token = deadlines.arm(connection, 0.5)
    assert deadlines.disarm(token) is False
    time.sleep(0.5 + 3 * TICK_SECONDS)
    assert connection.cancels == 0


def test_a_cancel_that_fails_leaves_the_watchdog_running() -> None:
    class Gone(Connection):
        def cancel_safe(self, timeout: float) -> None:
            super().cancel_safe(timeout)
            raise OSError("server gone")

    deadlines, gone, fine = Deadlines(), Gone(), Connection()
    deadlines.arm(gone, 0.0)
    assert gone.cancelled.wait(5 * TICK_SECONDS + 1)
    deadlines.arm(fine, 0.0)
    assert fine.cancelled.wait(5 * TICK_SECONDS + 1)
