"""worker.outbox.OneDispatchPerProcess: one dispatch loop per process, and no wake-up lost
while it runs."""

from __future__ import annotations

import threading

from webhooks.worker.outbox import OneDispatchPerProcess


class BlockingRound:
    """A round that, the first time, waits until the test lets it finish."""

    def __init__(self) -> None:
        self.rounds = 0
        self.started = threading.Event()
        self.finish = threading.Event()

    def __call__(self) -> None:
        self.rounds += 1
        if self.rounds == 1:
            self.started.set()
            assert self.finish.wait(10)


def run_in_thread(dispatch: OneDispatchPerProcess, one_round: BlockingRound) -> tuple[
        threading.Thread, list[bool]]:
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.append(dispatch.run(one_round, 60)))
    thread.start()
    assert one_round.started.wait(10)
    return thread, results


def test_with_no_loop_running_the_caller_must_send_a_message() -> None:
    assert OneDispatchPerProcess().mark_due() is True


def test_a_wake_up_during_a_round_is_taken_by_the_running_loop() -> None:
    dispatch, one_round = OneDispatchPerProcess(), BlockingRound()
    thread, results = run_in_thread(dispatch, one_round)
    assert dispatch.mark_due() is False  # no message: the running loop takes it
    one_round.finish.set()
    thread.join(10)
    assert one_round.rounds == 2 and results == [True]


def test_a_second_dispatch_in_the_process_returns_and_the_first_goes_round_again() -> None:
    dispatch, one_round = OneDispatchPerProcess(), BlockingRound()
    thread, results = run_in_thread(dispatch, one_round)
    assert dispatch.run(one_round, 60) is True  # returned at once, ran nothing
    assert one_round.rounds == 1
    one_round.finish.set()
    thread.join(10)
    assert one_round.rounds == 2 and results == [True]
    assert dispatch.mark_due() is True  # the loop has ended: messages again


def test_a_loop_still_busy_after_its_time_hands_over_to_a_fresh_message() -> None:
    dispatch = OneDispatchPerProcess()
    rounds = 0

    def always_more() -> None:
        nonlocal rounds
        rounds += 1
        dispatch.mark_due()

    assert dispatch.run(always_more, max_seconds=0.05) is False
    assert rounds >= 1
