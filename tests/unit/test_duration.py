"""`webhooks audit --stale DURATION`: a whole number and its unit, nothing else."""

from __future__ import annotations

from datetime import timedelta

import click
import pytest

from webhooks.cli import Duration, parse_duration


@pytest.mark.parametrize(("text", "expected"), [
    ("900s", timedelta(seconds=900)), ("15m", timedelta(minutes=15)),
    ("1h", timedelta(hours=1)), ("2d", timedelta(days=2)), (" 0m ", timedelta(0)),
])
def test_a_number_and_its_unit_is_a_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected
    assert Duration().convert(text, None, None) == expected


@pytest.mark.parametrize("text", ["", "15", "m", "1.5h", "-1m", "1h30m", "15 minutes", "1w",
                                  "15M"])
def test_anything_else_is_not(text: str) -> None:
    assert parse_duration(text) is None
    with pytest.raises(click.BadParameter, match="is not a duration"):
        Duration().convert(text, None, None)


def test_a_duration_past_the_range_of_time_is_refused() -> None:
    with pytest.raises(click.BadParameter, match="is not a duration"):
        Duration().convert("99999999999999d", None, None)
