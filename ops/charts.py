"""A small line chart of lag samples, drawn server-side as SVG coordinates (no JavaScript)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

WIDTH, HEIGHT = 600, 160
MARGIN_LEFT, MARGIN_BOTTOM, MARGIN_TOP = 48, 20, 8


@dataclass(frozen=True)
class LineChart:
    lines: list[str]  # polyline `points` attributes; a gap in the samples starts a new line
    y_max: float
    width: int = WIDTH
    height: int = HEIGHT
    left: int = MARGIN_LEFT
    bottom: int = HEIGHT - MARGIN_BOTTOM
    top: int = MARGIN_TOP

    @property
    def ticks(self) -> list[tuple[int, str]]:
        """(y, label) of the horizontal grid lines: the top, the middle and zero."""
        middle = (self.top + self.bottom) // 2
        return [(self.top, f"{self.y_max:g} s"), (middle, f"{self.y_max / 2:g} s"), (self.bottom, "0")]

    @property
    def label_x(self) -> int:
        return self.left - 6


def _nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= value (at least 1)."""
    step = 1.0
    while True:
        for factor in (1, 2, 5):
            if value <= step * factor:
                return step * factor
        step *= 10


def lag_chart(samples: list[tuple[datetime, float]], *, start: datetime, end: datetime,
              gap: timedelta) -> LineChart:
    """Samples as (time, seconds) -> lines over [start, end]; samples further apart than `gap` are not joined."""
    y_max = _nice_ceiling(max((lag for _, lag in samples), default=0.0))
    span = (end - start).total_seconds() or 1.0
    plot_width = WIDTH - MARGIN_LEFT
    plot_height = (HEIGHT - MARGIN_BOTTOM) - MARGIN_TOP
    lines: list[list[str]] = []
    previous = None
    for at, lag in samples:
        x = MARGIN_LEFT + plot_width * (at - start).total_seconds() / span
        y = MARGIN_TOP + plot_height * (1 - min(lag, y_max) / y_max)
        if previous is None or at - previous > gap:
            lines.append([])
        lines[-1].append(f"{x:.1f},{y:.1f}")
        previous = at
    # A lone point would draw nothing: give it a short flat segment.
    drawn = [" ".join(points if len(points) > 1 else points + [_nudge(points[0])]) for points in lines]
    return LineChart(lines=drawn, y_max=y_max)


def _nudge(point: str) -> str:
    x, y = point.split(",")
    return f"{float(x) + 2:.1f},{y}"
