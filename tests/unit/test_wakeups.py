"""One wake-up per claim's worth of jobs, whoever sends them: the ids a message names and
how many messages a count of due rows needs."""

from __future__ import annotations

from webhooks.shared import wakeups


def test_one_id_per_claims_worth_the_last_of_each_share() -> None:
    per = wakeups.JOBS_PER_MESSAGE
    ids = list(range(1, 2 * per + 21))
    assert wakeups.shares(ids) == [per, 2 * per, 2 * per + 20]
    assert wakeups.shares([7]) == [7]
    assert wakeups.shares([]) == []


def test_messages_for_a_count_rounds_up() -> None:
    per = wakeups.JOBS_PER_MESSAGE
    assert [wakeups.messages_for(n) for n in (0, 1, per, per + 1)] == [0, 1, 1, 2]
    assert wakeups.messages_for(120, 50) == 3
