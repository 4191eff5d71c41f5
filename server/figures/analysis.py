"""Pure helpers over series: smoothing and the first step where a candidate leaves a reference.

Series arrive as lists of (step, value); non-finite values are skipped by smoothing (they are
drawn as markers elsewhere) and count as "outside the band" for divergence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def ema(values: Sequence[float], weight: float) -> list[float]:
    """Exponential moving average with TensorBoard's debiasing; NaN/Inf leave it unchanged."""
    out: list[float] = []
    last = 0.0
    seen = 0
    for value in values:
        if math.isfinite(value):
            last = last * weight + (1 - weight) * value
            seen += 1
        debias = 1 - weight**seen if seen else 1.0
        out.append(last / debias if seen else math.nan)
    return out


def running_mean(values: Sequence[float], window: int) -> list[float]:
    """Mean of the last `window` finite values at each position."""
    out: list[float] = []
    buf: list[float] = []
    total = 0.0
    for value in values:
        if math.isfinite(value):
            buf.append(value)
            total += value
            if len(buf) > window:
                total -= buf.pop(0)
        out.append(total / len(buf) if buf else math.nan)
    return out


def band(values: Sequence[float], window: int, k: float) -> tuple[list[float], list[float]]:
    """Reference band: rolling mean ± k × rolling std over `window` finite values (std floored at
    1% of |mean| so a flat reference still has a band)."""
    lows, highs = [], []
    buf: list[float] = []
    for value in values:
        if math.isfinite(value):
            buf.append(value)
            if len(buf) > window:
                buf.pop(0)
        if not buf:
            lows.append(math.nan)
            highs.append(math.nan)
            continue
        mean = sum(buf) / len(buf)
        std = math.sqrt(sum((v - mean) ** 2 for v in buf) / len(buf))
        width = k * max(std, 0.01 * abs(mean), 1e-12)
        lows.append(mean - width)
        highs.append(mean + width)
    return lows, highs


def first_divergence(
    reference: Sequence[tuple[int, float]],
    candidate: Sequence[tuple[int, float]],
    *,
    k: float = 3.0,
    window: int = 20,
    sustain: int = 5,
) -> int | None:
    """The first step after which the candidate stays outside the reference's band for
    `sustain` consecutive shared steps; None if it never does."""
    ref = dict(reference)
    steps = sorted(ref)
    lows, highs = band([ref[s] for s in steps], window, k)
    limits = dict(zip(steps, zip(lows, highs, strict=True), strict=True))
    run_start: int | None = None
    run_length = 0
    for step, value in sorted(candidate):
        if step not in limits:
            continue
        low, high = limits[step]
        outside = not math.isfinite(value) or (math.isfinite(low) and (value < low or value > high))
        if outside:
            if run_start is None:
                run_start = step
            run_length += 1
            if run_length >= sustain:
                return run_start
        else:
            run_start, run_length = None, 0
    return None
