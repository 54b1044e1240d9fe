"""The overview's events-per-hour chart, laid out here and drawn by the template as
inline SVG: no script, no image request, readable without colour."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

WIDTH, HEIGHT = 760, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 12, 28  # margins: axis labels left and below
LABEL_EVERY = 3  # hours between x-axis labels


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    count: int
    title: str  # the hour and its count, the bar's tooltip
    label: str | None  # the x-axis label under it, every LABEL_EVERY hours


@dataclass(frozen=True)
class Tick:
    y: float
    value: int


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    ticks: list[Tick]
    total: int
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    baseline: float = HEIGHT - BOTTOM


def nice_ceiling(value: int) -> int:
    """The axis top: the smallest of 1, 2, 3, 4, 5, 6, 8 x 10^n at or above value."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 3, 4, 5, 6, 8, 10) if step * power >= value)


def layout(hours: list[tuple[datetime, int]]) -> Chart:
    top = nice_ceiling(max((count for _, count in hours), default=0))
    plot_height = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT - RIGHT) / max(len(hours), 1)
    bars = []
    for index, (hour, count) in enumerate(hours):
        height = plot_height * count / top
        end = hour + timedelta(hours=1)
        bars.append(Bar(
            x=round(LEFT + index * slot + slot * 0.1, 1), y=round(HEIGHT - BOTTOM - height, 1),
            width=round(slot * 0.8, 1), height=round(height, 1), count=count,
            title=f"{hour:%Y-%m-%d %H:%M}-{end:%H:%M} UTC: {count} event(s)",
            label=f"{hour:%H:%M}" if index % LABEL_EVERY == 0 else None,
        ))
    ticks = [Tick(y=round(HEIGHT - BOTTOM - plot_height * part, 1), value=round(top * part))
             for part in (0, 0.5, 1) if part == 0 or round(top * part) == top * part]
    return Chart(bars=bars, ticks=ticks, total=sum(count for _, count in hours))
