"""A series drawn on its family's common scale: what the compare overlays when runs log the
gap under different formulas (TRL's mean |logp diff| beside verl's k3), converted exactly as
the alarms convert it before judging (`server.domain.signals`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from server.domain.signals import Signal
from server.figures.points import Point

PIVOT = {"magnitude": 0.0, "square": 0.0, "excess_square": 1.0}
"""Where a conversion that is not monotone turns (|x|, x², (x − 1)²): its smallest value."""


def _to(signal: Signal, value: float | None) -> float | None:
    return None if value is None else signal.to_scale(float(value))


def scaled_point(point: Point, signal: Signal) -> Point:
    """One step bucket on the family's scale: its value, mean and last converted, its min–max
    band the range the conversion maps it to (a band across the pivot of |x| or x² starts at
    0). A bucket's mean is the converted mean of its steps' values, exact for a single step."""
    low, high = _to(signal, point["min"]), _to(signal, point["max"])
    if low is not None and high is not None and low > high:
        low, high = high, low
    pivot = PIVOT.get(signal.conversion)
    lo_raw, hi_raw = point["min"], point["max"]
    if pivot is not None and lo_raw is not None and hi_raw is not None and lo_raw < pivot < hi_raw:
        low = signal.to_scale(pivot)
    last = point["last"]
    return {
        **point,
        "min": low,
        "max": high,
        "mean": _to(signal, point["mean"]),
        "last": last if last is None or not math.isfinite(last) else signal.to_scale(last),
    }


def scaled(points: Sequence[Point], signal: Signal) -> list[Point]:
    """A series' step buckets on its family's scale (see `scaled_point`)."""
    return [scaled_point(p, signal) for p in points]
