"""Lining up runs that came from different places: the x position of each point of a series.

Runs imported from TensorBoard, MLflow and W&B, or logged by trainers that count steps
differently (a step per batch, per PPO epoch, per rollout), do not share a step axis. The compare
view can therefore put them side by side by

- `step`: the step as logged (the default);
- `time`: wall-clock seconds since the run's first drawn point;
- `samples`: the value of a cumulative counter metric at that step (samples or tokens seen),
  read from the run's own series of that metric, linearly interpolated between its points.

Pure functions over the points the read side returns (`step`, `step_end`, `time`, `last`, …):
each returns the points it could place, with an added `x`; a point with no wall time, or outside
the steps the counter was logged at, has no place and is left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

Point = dict[str, Any]

ALIGNS: dict[str, str] = {
    "step": "step",
    "time": "wall time from start",
    "samples": "samples seen",
}
AXIS_TITLES: dict[str, str] = {
    "step": "step",
    "time": "seconds since the run's first point",
    "samples": "samples seen",
}
DEFAULT_COUNTER = "samples_seen"
"""The counter `samples` reads unless the view names another (TRL's `num_tokens`, say)."""


def parse_align(value: str | None) -> str:
    """A known alignment, `step` for anything else (an old or hand-edited link)."""
    return value if value in ALIGNS else "step"


def last_step(point: Point) -> int:
    """The step a bucket's `last` value and `time` belong to."""
    return int(point["step_end"] if point.get("count", 1) > 1 else point["step"])


def by_step(points: Sequence[Point]) -> list[Point]:
    return [{**p, "x": float(last_step(p))} for p in points]


def by_time(points: Sequence[Point]) -> list[Point]:
    """x = seconds since the earliest wall time among the points."""
    timed = [p for p in points if _finite(p.get("time"))]
    if not timed:
        return []
    start = min(float(p["time"]) for p in timed)
    return [{**p, "x": float(p["time"]) - start} for p in timed]


def by_counter(points: Sequence[Point], counter: Sequence[Point]) -> list[Point]:
    """x = the counter's value at each point's step, interpolated between the counter's own
    points (its last value per bucket); points before its first or after its last step, and
    every point when the counter has no finite value, are left out."""
    known = sorted((last_step(c), float(c["last"])) for c in counter if _finite(c.get("last")))
    if not known:
        return []
    steps = np.array([s for s, _ in known], dtype=np.float64)
    values = np.array([v for _, v in known], dtype=np.float64)
    placed = [p for p in points if steps[0] <= last_step(p) <= steps[-1]]
    xs = np.interp([last_step(p) for p in placed], steps, values)
    return [{**p, "x": float(x)} for p, x in zip(placed, xs, strict=True)]


def aligned(
    points: Sequence[Point], align: str, counter: Sequence[Point] | None = None
) -> list[Point]:
    """The points placed by `align` (see the module docstring)."""
    if align == "time":
        return by_time(points)
    if align == "samples":
        return by_counter(points, counter or [])
    return by_step(points)


def x_at_step(points: Sequence[Point], step: int | None) -> float | None:
    """The x of the first placed point at or after `step` (where a divergence found on steps
    shows on the aligned axis); None when there is none."""
    if step is None:
        return None
    for point in points:
        if last_step(point) >= step:
            return float(point["x"])
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
