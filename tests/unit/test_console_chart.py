"""The overview chart's layout: every hour a bar, the tallest reaching the axis top, which
is a round number at or above the busiest hour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from webhooks.console import chart


@pytest.mark.parametrize(("busiest", "top"), [(0, 1), (1, 1), (7, 8), (27, 30), (50, 50),
                                              (51, 60), (999, 1000)])
def test_the_axis_top_is_round_and_at_least_the_busiest_hour(busiest: int, top: int) -> None:
    assert chart.nice_ceiling(busiest) == top


def test_one_bar_per_hour_scaled_to_the_axis() -> None:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    hours = [(start + timedelta(hours=n), n) for n in range(24)]
    laid = chart.layout(hours)
    assert len(laid.bars) == 24 and laid.total == sum(range(24))
    assert laid.bars[0].height == 0
    tallest = laid.bars[-1]  # 23 of an axis of 30
    assert tallest.height == pytest.approx((chart.HEIGHT - chart.TOP - chart.BOTTOM) * 23 / 30,
                                           abs=0.1)
    assert tallest.y + tallest.height == pytest.approx(laid.baseline, abs=0.1)
    assert [bar.label for bar in laid.bars[:4]] == ["00:00", None, None, "03:00"]
    assert [tick.value for tick in laid.ticks] == [0, 15, 30]
    assert "23:00-00:00 UTC: 23 event(s)" in tallest.title


def test_an_empty_day_draws_flat_bars() -> None:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    laid = chart.layout([(start + timedelta(hours=n), 0) for n in range(24)])
    assert all(bar.height == 0 for bar in laid.bars) and laid.total == 0
