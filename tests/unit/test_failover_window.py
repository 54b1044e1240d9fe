"""The after-failover window (shared/failover.py in_window): open from the failover's first
sight for RECONCILE_AFTER_FAILOVER_HOURS, closed without a recorded failover."""

from __future__ import annotations

from webhooks.shared.failover import in_window


def test_the_window_is_open_for_its_hours_after_a_failover() -> None:
    assert in_window(0.0, 72)
    assert in_window(72 * 3600 - 1, 72)
    assert not in_window(72 * 3600, 72)
    assert not in_window(1.5 * 3600, 1) and in_window(1.5 * 3600, 2)  # fractions of hours


def test_without_a_failover_the_window_is_closed() -> None:
    assert not in_window(None, 72)
