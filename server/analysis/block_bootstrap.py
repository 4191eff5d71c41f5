"""Two-level block bootstrap of a pooled median: resample runs, then circular blocks of steps.

A metric such as k3 is strongly autocorrelated across steps (training drifts slowly), so
resampling single steps would treat thousands of near-copies as independent evidence and give
intervals far too narrow. Each replicate here

1. draws as many runs as there are, with replacement (runs differ from each other: a seed, a
   node, a day), and
2. rebuilds every drawn run from blocks of consecutive steps taken at uniform random starts,
   wrapping at the end (the circular block bootstrap of Politis & Romano, 1992: every step is
   equally likely to be drawn, so the ends of a run are not under-represented),

then takes the median of everything the replicate pooled. The block length of each run comes
from its own autocorrelation (`block_length`).

Every replicate's median is computed exactly, many replicates at once: the replicates are rows of
one matrix, and rows that pool fewer values (runs of different lengths) are padded with equal
numbers of -inf and +inf, which leaves the middle of each row where it was.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

_MAX_CELLS = 1 << 21
"""Ranks held at once while medians are taken (4–8 MiB): bounds memory and keeps the selection's
working set near the cache."""


def thin(series: FloatArray, max_steps: int) -> FloatArray:
    """Every k-th value, with the smallest k that leaves at most `max_steps` values.

    A fixed stride keeps the step order (which the blocks need) and, on a slowly drifting series,
    nearly all of its information; on steps that are close to independent it widens the interval
    (conservative), it never narrows it.
    """
    stride = max(1, math.ceil(series.size / max_steps))
    return series[::stride]


def _mid_ranks(series: FloatArray) -> FloatArray:
    """Ranks with ties given their average rank, so a constant stretch carries no fake trend."""
    ordered = np.sort(series)
    low = np.searchsorted(ordered, series, side="left")
    high = np.searchsorted(ordered, series, side="right")
    return (low + high - 1) / 2.0


def _autocovariance(x: FloatArray, max_lag: int) -> FloatArray:
    """Biased sample autocovariance at lags 0..max_lag of a centred series, by FFT."""
    n = x.size
    size = 1 << (2 * n - 1).bit_length()
    spectrum = np.fft.rfft(x, size)
    full = np.fft.irfft(spectrum * np.conj(spectrum), size)
    return np.asarray(full[: max_lag + 1] / n, dtype=np.float64)


def block_length(series: FloatArray) -> int:
    """Block length for the circular block bootstrap of one run, from its autocorrelation.

    The rule of Politis & White (2004), as corrected by Patton, Politis & White (2009): pick the
    lag beyond which the sample autocorrelation stays insignificant, estimate the spectral
    quantities with a flat-top lag window up to twice that lag, and take
    b = (2 G² / D)^(1/3) · n^(1/3), capped at min(3√n, n/3). Unlike a bare n^(1/3) it grows with
    the correlation length: a series that drifts over tens of steps gets blocks of tens of steps,
    one with independent steps gets 1.

    It is computed on mid-ranks: the statistic is a median (rank-based), and ranks are
    indifferent to the heavy right tail of k3 and to exact zeros.
    """
    n = series.size
    if n < 8:
        return 1
    x = _mid_ranks(series)
    x -= x.mean()
    k_n = max(5, math.ceil(math.sqrt(math.log10(n))))
    m_max = min(math.ceil(math.sqrt(n)) + k_n, n - 1)
    acov = _autocovariance(x, m_max)
    if acov[0] <= 0.0:
        return 1
    bound = 2.0 * math.sqrt(math.log10(n) / n)
    quiet = np.abs(acov[1:] / acov[0]) < bound  # lags 1..m_max
    windows = np.lib.stride_tricks.sliding_window_view(quiet, k_n).all(axis=1)
    m_hat = int(np.argmax(windows)) if windows.any() else m_max
    big_m = min(2 * max(m_hat, 1), m_max)
    lags = np.arange(-big_m, big_m + 1)
    t = np.abs(lags) / big_m
    window = np.clip(np.where(t <= 0.5, 1.0, 2.0 * (1.0 - t)), 0.0, 1.0)
    weighted = window * acov[np.abs(lags)]
    g_zero = float(weighted.sum())
    g_one = float((np.abs(lags) * weighted).sum())
    d_circular = 4.0 / 3.0 * g_zero**2
    if d_circular <= 0.0:
        return 1
    b = (2.0 * g_one**2 / d_circular) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    cap = math.ceil(min(3.0 * math.sqrt(n), n / 3.0))
    return int(min(max(round(b), 1), cap))


def _resampled_runs(
    values: NDArray[np.integer], block: int, copies: int, rng: np.random.Generator
) -> NDArray[np.integer]:
    """`copies` circular-block resamples of one run, one per row, each as long as the run."""
    n = values.size
    block = min(block, n)
    n_blocks = -(-n // block)
    wrapped = np.concatenate([values, values[: block - 1]])
    starts = rng.integers(0, n, size=(copies, n_blocks, 1), dtype=np.int32)
    index = (starts + np.arange(block, dtype=np.int32)).reshape(copies, n_blocks * block)[:, :n]
    return np.asarray(wrapped[index])


def _middle_ranks(
    runs: Sequence[NDArray[np.integer]],
    blocks: Sequence[int],
    picks: NDArray[np.intp],
    rng: np.random.Generator,
    high: int,
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """The two middle ranks (equal when the count is odd) of each replicate in `picks`.

    Rows of `picks` are replicates, its values the runs each replicate drew. A replicate that
    pooled N values of a row W wide gets ⌊(W − N)/2⌋ pads below every rank (-1) and the rest
    above (`high`), so its middle sits at columns W/2 − 1 and W/2 whatever N is.
    """
    lengths = np.array([run.size for run in runs], dtype=np.intp)
    sizes = lengths[picks]
    totals = sizes.sum(axis=1)
    width = int(totals.max()) + int(totals.max()) % 2
    starts = np.cumsum(sizes, axis=1) - sizes + (np.arange(picks.shape[0]) * width)[:, None]
    pool = np.full((picks.shape[0], width), high, dtype=runs[0].dtype)
    if (totals != width).any():
        column = np.arange(width)
        low_end = totals + (width - totals) // 2
        pool[(column >= totals[:, None]) & (column < low_end[:, None])] = -1
    flat = pool.reshape(-1)
    for r, (run, block) in enumerate(zip(runs, blocks, strict=True)):
        rows, slots = np.nonzero(picks == r)
        if rows.size:
            at = starts[rows, slots][:, None] + np.arange(run.size)
            flat[at] = _resampled_runs(run, block, rows.size, rng)
    half = width // 2
    pool.partition((half - 1, half), axis=1)
    lower = pool[:, half - 1].astype(np.intp)
    upper = np.where(totals % 2 == 1, lower, pool[:, half]).astype(np.intp)
    return lower, upper


def pooled_medians(
    runs: Sequence[FloatArray],
    blocks: Sequence[int],
    n_boot: int,
    rng: np.random.Generator,
) -> FloatArray:
    """Medians of `n_boot` two-level bootstrap replicates of the pooled values of `runs`.

    `runs` are 1-D arrays in step order, `blocks` their block lengths (1 resamples single steps).
    The resampling works on ranks in the pooled values (the smallest integer type that holds
    them): medians are order statistics, so this is exact, and small integers halve to quarter
    the memory the selection has to move compared with float64.
    """
    pooled = np.concatenate(runs)
    order = np.argsort(pooled, kind="stable")
    dtype = np.int16 if pooled.size < np.iinfo(np.int16).max else np.int32
    ranks = np.empty(pooled.size, dtype=dtype)
    ranks[order] = np.arange(pooled.size, dtype=dtype)
    ranked = np.split(ranks, np.cumsum([run.size for run in runs])[:-1])
    ordered = pooled[order]
    picks = rng.integers(0, len(runs), size=(n_boot, len(runs)))
    rows = max(1, _MAX_CELLS // (len(runs) * max(run.size for run in runs)))
    out = np.empty(n_boot)
    for first in range(0, n_boot, rows):
        chunk = picks[first : first + rows]
        lower, upper = _middle_ranks(ranked, blocks, chunk, rng, pooled.size)
        # halves first: the mean of two values near the float64 limit (the contract allows
        # 1e308) must not overflow; for all other values it is the same number
        out[first : first + rows] = 0.5 * ordered[lower] + 0.5 * ordered[upper]
    return out


def log_medians(
    runs: Sequence[FloatArray],
    *,
    n_boot: int,
    rng: np.random.Generator,
    fixed_block: int | None,
    max_steps: int,
) -> FloatArray:
    """Logs of `n_boot` replicate pooled medians of one side (one GPU type's runs).

    Each run is thinned to `max_steps` values first and cut into blocks of `fixed_block` steps,
    or of its own `block_length` when None. A replicate median of 0 counts as the smallest
    positive float so the logs stay finite. One side's replicates can serve every pair it is in:
    the sides of a pair are resampled independently anyway.
    """
    thinned = [thin(run, max_steps) for run in runs]
    blocks = [fixed_block or block_length(run) for run in thinned]
    medians = pooled_medians(thinned, blocks, n_boot, rng)
    return np.asarray(np.log(np.maximum(medians, np.finfo(np.float64).tiny)), dtype=np.float64)


def percentile_interval(
    logs_a: FloatArray, logs_b: FloatArray, level: float
) -> tuple[float, float]:
    """Percentile interval of A over B from the two sides' replicate log-medians.

    On the log scale the interval of B over A is exactly the reciprocal of that of A over B.
    """
    tail = (1.0 - level) / 2.0
    lo, hi = np.exp(np.quantile(logs_a - logs_b, [tail, 1.0 - tail]))
    return float(lo), float(hi)


def log_ratio_interval(
    runs_a: Sequence[FloatArray],
    runs_b: Sequence[FloatArray],
    *,
    level: float,
    n_boot: int,
    rng: np.random.Generator,
    fixed_block: int | None,
    max_steps: int,
) -> tuple[float, float]:
    """Percentile interval of the ratio of pooled medians, A over B, taken on the log scale;
    both sides resampled independently (`log_medians`)."""
    logs = [
        log_medians(runs, n_boot=n_boot, rng=rng, fixed_block=fixed_block, max_steps=max_steps)
        for runs in (runs_a, runs_b)
    ]
    return percentile_interval(logs[0], logs[1], level)
