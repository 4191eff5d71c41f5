"""Where a line must break, and what a log axis writes at its ticks.

A trace logged at steps 1–53 and again at 108–109 has no value over 54–107; a line drawn
straight from 53 to 108 shows a ramp that never happened. `with_gaps` puts an empty point (a
NaN, which a line does not bridge) into every jump between step buckets that is far wider than
the series' usual spacing, so a run logged every 10 steps is one line and a restart is two.

Plotly labels a log axis that spans less than a few decades with bare mantissas between the
decades ("5, 2"), which read as values; `log_axis` gives every tick its magnitude.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import pairwise
from statistics import median
from typing import Any

from server.domain.series import bucket_value
from server.figures.points import Point

GAP_FACTOR = 2.0
"""A jump between consecutive buckets wider than this many times the series' usual one is a
gap: a run that logs every step and skipped one draws a line; one that stopped for a while
does not."""


def _distances(points: Sequence[Point]) -> list[int]:
    """Steps from the end of each bucket to the start of the next."""
    return [int(later["step"]) - int(earlier["step_end"]) for earlier, later in pairwise(points)]


def gap_after(points: Sequence[Point]) -> list[int]:
    """Indices of the buckets after which the series jumps over a gap (see `GAP_FACTOR`)."""
    distances = _distances(points)
    if len(distances) < 2:
        return []
    usual = max(median(distances), 1)
    return [i for i, d in enumerate(distances) if d > GAP_FACTOR * usual]


def gap_point(after: Point) -> Point:
    """An empty bucket one step after `after`: no value, nothing non-finite, no time."""
    step = int(after["step_end"]) + 1
    return {
        "step": step,
        "step_end": step,
        "min": None,
        "max": None,
        "mean": None,
        "last": math.nan,
        "count": 1,
        "nan": 0,
        "pos_inf": 0,
        "neg_inf": 0,
        "time": None,
        "gap": True,
    }


def with_gaps(points: Sequence[Point]) -> list[Point]:
    """`points` with an empty point in every gap of their steps (see module)."""
    breaks = set(gap_after(points))
    out: list[Point] = []
    for i, point in enumerate(points):
        out.append(point)
        if i in breaks:
            out.append(gap_point(point))
    return out


def is_gap(point: Point) -> bool:
    return bool(point.get("gap"))


def log_tickformat(values: Iterable[float]) -> str:
    """A d3 number format for a log axis over `values`: every tick in exponent form ("5e-4")
    where the values reach below 0.01 or to 10⁴ and beyond, else the plain number ("0.5", "20"),
    which needs none; never a bare mantissa."""
    positive = [v for v in values if math.isfinite(v) and v > 0]
    if positive and (min(positive) < 1e-2 or max(positive) >= 1e4):
        return "~e"
    return "~g"


def log_axis(values: Iterable[float], **extra: Any) -> dict[str, Any]:
    """A log axis whose ticks carry their magnitude (`log_tickformat`)."""
    return {"type": "log", "tickformat": log_tickformat(values), "exponentformat": "e", **extra}


def drawn_values(series: Sequence[tuple[str, Sequence[Point]]]) -> list[float]:
    """Every finite value curves of `series` draw (bucket values and band edges): what a log
    axis over them spans."""
    out: list[float] = []
    for _, points in series:
        for p in points:
            out.extend(float(v) for v in (p.get("min"), p.get("max")) if v is not None)
            out.append(bucket_value(p))
    return [v for v in out if math.isfinite(v)]
