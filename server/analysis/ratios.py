"""How many times larger one GPU type's median is than another's, with an interval, in words.

The point estimate is the ratio of pooled medians (every value of every run of a GPU type). The
interval comes from a two-level block bootstrap (`server.analysis.block_bootstrap`): runs are
resampled because they differ from each other, steps in blocks because consecutive steps are
alike. `server.analysis.hardware` re-exports the public names here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from server.analysis import block_bootstrap
from server.analysis.block_bootstrap import FloatArray
from server.errors import Rejected

MAX_STEPS_PER_RUN = 1000
"""Longer runs are thinned to this many steps (a fixed stride) before resampling: consecutive
k3 values are strongly correlated, so every k-th step keeps nearly all of a run's information,
and 2 × 6 runs × 1,000 resamples stay well under a second on two cores."""


@dataclass(frozen=True)
class RatioEstimate:
    """`gpu_a`'s pooled median of `metric` over `gpu_b`'s, with a bootstrap interval [lo, hi].

    `runs_*` count the runs (or segments) behind each side, `steps_*` the values pooled.
    """

    metric: str
    gpu_a: str
    gpu_b: str
    ratio: float
    lo: float
    hi: float
    level: float
    runs_a: int
    runs_b: int
    steps_a: int
    steps_b: int


def _side(runs: Sequence[ArrayLike], gpu: str) -> list[FloatArray]:
    """One GPU type's runs as float arrays, refused with the reason if unusable.

    A run with no values is dropped (and not counted): it carries no evidence either way.
    """
    arrays = [np.asarray(run, dtype=np.float64) for run in runs]
    arrays = [array for array in arrays if array.size]
    if not arrays:
        raise Rejected(f"{gpu}: no values to compare")
    for array in arrays:
        if array.ndim != 1:
            raise Rejected(f"{gpu}: each run must be a 1-D series of values")
        if not np.isfinite(array).all():
            raise Rejected(f"{gpu}: values must be finite (drop NaN and inf first)")
        if (array < 0).any():
            raise Rejected(f"{gpu}: a ratio of medians needs a non-negative metric")
    return arrays


def median_ratio(
    a: Sequence[ArrayLike],
    b: Sequence[ArrayLike],
    *,
    gpu_a: str,
    gpu_b: str,
    metric: str = "k3_kl",
    level: float = 0.95,
    n_boot: int = 1000,
    seed: int | np.random.Generator = 0,
    block_length: int | None = None,
    max_steps_per_run: int = MAX_STEPS_PER_RUN,
) -> RatioEstimate:
    """Ratio of pooled medians, A over B, with a two-level block-bootstrap percentile interval.

    `a` and `b` are runs (or segments), each a 1-D series of the metric's finite values in step
    order. The point estimate uses every value. Each replicate resamples runs with replacement
    and rebuilds each from circular blocks of steps; `block_length` None picks one per run from
    its autocorrelation, 1 would treat steps as independent. Runs longer than
    `max_steps_per_run` are thinned by a fixed stride first, which can only widen the interval.
    With one run a side, run-to-run spread is unseen and the interval covers step noise only.
    """
    if not 0.0 < level < 1.0:
        raise Rejected(f"level must be between 0 and 1, got {level}")
    if n_boot < 100:
        raise Rejected(f"n_boot must be at least 100, got {n_boot}")
    if max_steps_per_run < 2 or (block_length is not None and block_length < 1):
        raise Rejected("max_steps_per_run must be at least 2 and block_length at least 1")
    runs_a, runs_b = _side(a, gpu_a), _side(b, gpu_b)
    median_a = float(np.median(np.concatenate(runs_a)))
    median_b = float(np.median(np.concatenate(runs_b)))
    if median_a <= 0.0 or median_b <= 0.0:
        zero = gpu_a if median_a <= 0.0 else gpu_b
        raise Rejected(f"{zero}: the median {metric} is 0, so a ratio is undefined")
    lo, hi = block_bootstrap.log_ratio_interval(
        runs_a,
        runs_b,
        level=level,
        n_boot=n_boot,
        rng=seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed),
        fixed_block=block_length,
        max_steps=max_steps_per_run,
    )
    return RatioEstimate(
        metric=metric,
        gpu_a=gpu_a,
        gpu_b=gpu_b,
        ratio=median_a / median_b,
        lo=lo,
        hi=hi,
        level=level,
        runs_a=len(runs_a),
        runs_b=len(runs_b),
        steps_a=sum(run.size for run in runs_a),
        steps_b=sum(run.size for run in runs_b),
    )


def all_pairs(
    by_gpu: Mapping[str, Sequence[ArrayLike]],
    *,
    reference: str | None = None,
    metric: str = "k3_kl",
    level: float = 0.95,
    n_boot: int = 1000,
    seed: int | np.random.Generator = 0,
    block_length: int | None = None,
    max_steps_per_run: int = MAX_STEPS_PER_RUN,
) -> list[RatioEstimate]:
    """`median_ratio` for every pair of GPU types, in the mapping's order.

    With `reference`, each other GPU type is compared against it (reference as B); else every
    pair (earlier type as A). Each pair draws from its own child of the seeded generator (in
    pair order): results are reproducible and no two pairs share random draws.
    """
    names = list(by_gpu)
    if len(names) < 2:
        raise Rejected("a comparison needs at least two GPU types")
    if reference is not None and reference not in by_gpu:
        raise Rejected(f"reference GPU {reference!r} has no runs")
    if reference is None:
        pairs = list(itertools.combinations(names, 2))
    else:
        pairs = [(name, reference) for name in names if name != reference]
    root = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return [
        median_ratio(
            by_gpu[gpu_a],
            by_gpu[gpu_b],
            gpu_a=gpu_a,
            gpu_b=gpu_b,
            metric=metric,
            level=level,
            n_boot=n_boot,
            seed=child,
            block_length=block_length,
            max_steps_per_run=max_steps_per_run,
        )
        for (gpu_a, gpu_b), child in zip(pairs, root.spawn(len(pairs)), strict=True)
    ]


def format_ratio(value: float, digits: int = 2) -> str:
    """A ratio to `digits` significant digits: plain from 0.001 to 9999, else like 3.2e-5."""
    if math.isnan(value):
        return "nan"
    if value == 0.0:
        return "0"
    if math.isinf(value):
        return "∞"
    scientific = f"{value:.{digits - 1}e}"
    rounded = float(scientific)
    exponent = math.floor(math.log10(abs(rounded)))
    if -3 <= exponent < 4:
        return f"{rounded:.{max(digits - 1 - exponent, 0)}f}"
    mantissa, _, power = scientific.partition("e")
    return f"{mantissa}e{int(power)}"


def describe(estimate: RatioEstimate) -> str:
    """One plain sentence: "H20's median k3_kl is 0.031× A100's (95% interval 0.012 to 0.080;
    6 vs 5 runs)". Digits are added (up to 4) until distinct numbers read distinct."""
    numbers = (estimate.ratio, estimate.lo, estimate.hi)
    for digits in (2, 3, 4):
        texts = [format_ratio(x, digits) for x in numbers]
        if not any(
            texts[i] == texts[j] and numbers[i] != numbers[j]
            for i, j in itertools.combinations(range(3), 2)
        ):
            break
    ratio, lo, hi = texts
    runs = "run" if estimate.runs_a == estimate.runs_b == 1 else "runs"
    return (
        f"{estimate.gpu_a}'s median {estimate.metric} is {ratio}× {estimate.gpu_b}'s "
        f"({estimate.level * 100:g}% interval {lo} to {hi}; "
        f"{estimate.runs_a} vs {estimate.runs_b} {runs})"
    )
