"""A downsampled series' step bucket, and the one value that stands for it on a line."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def bucket_value(point: Mapping[str, Any]) -> float:
    """The value a line draws for a step bucket: its only value when it holds one step, else
    the mean of its finite values. NaN when there is none (a gap); ±Inf become NaN too — they
    are drawn as markers, and a line through them would lose its scale."""
    value = point["last"] if point["count"] == 1 else point["mean"]
    if value is None:
        return math.nan
    value = float(value)
    return value if math.isfinite(value) else math.nan


def has_nonfinite(point: Mapping[str, Any]) -> bool:
    """Whether any value the bucket holds was NaN or ±Inf."""
    return bool(point.get("nan") or point.get("pos_inf") or point.get("neg_inf"))
