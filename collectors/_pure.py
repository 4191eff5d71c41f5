"""The headline metrics in plain Python, for a host with neither NumPy nor torch.

`mismatch-collectors` has no required dependencies, so `log_step` must still do something
useful with plain lists. This path emits `PLAIN_PYTHON` of the vocabulary: every headline
scalar in both forms, the ratio and |d| extremes and the counts, with the definitions of
`_metrics` (see its docstring: d = lT − lR, ±20 clamp before an exp, population std, NaN
propagates), in float64 loops. The rest (buckets, correction diagnostics, update metrics)
needs NumPy or torch, which the `numpy` and `torch` extras install.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from collectors._vocabulary import CLAMP, EMPTY_STEP, PER_TOKEN, seq_form

_EXP_MAX = math.log(1.7976931348623157e308)
"""Above this math.exp raises; an IEEE exp (NumPy's, torch's) overflows to inf."""


def _exp(x: float) -> float:
    return math.inf if x > _EXP_MAX else math.exp(x)


def _log(x: float) -> float:
    """An IEEE log: −inf at 0, NaN below (math.log raises for both)."""
    if x > 0 or math.isnan(x):
        return math.log(x)
    return -math.inf if x == 0 else math.nan


def _clamp(x: float) -> float:
    return x if math.isnan(x) else min(max(x, -CLAMP), CLAMP)


def _k3(x: float) -> float:
    """The k3 estimator's term for a log ratio x (already clamped)."""
    return math.expm1(x) - x


def _per_token(lr: float, lt: float) -> dict[str, float]:
    """Each per-token quantity of the vocabulary's `PER_TOKEN`, for one token."""
    d = lt - lr
    dc = _clamp(d)
    p_t, p_r = _exp(lt), _exp(lr)
    log_m = _log(0.5 * (p_t + p_r))
    return {
        "k1_kl": -d,
        "k2_kl": 0.5 * d * d,
        "k3_kl": _k3(dc),
        "reverse_k3_kl": _k3(-dc),
        "ratio_mean": math.exp(dc),
        "ratio_abs_dev": abs(math.expm1(dc)),
        "abs_logp_diff_mean": abs(d),
        "mult_prob_error": math.exp(abs(dc)),
        "prob_diff_mean": abs(p_t - p_r),
        "js_div": 0.5 * _k3(_clamp(log_m - lt)) + 0.5 * _k3(_clamp(log_m - lr)),
    }


def _rows(x: Any) -> list[list[float]]:
    """A padded [sequences][tokens] grid; a flat list is one sequence."""
    rows = list(x)
    if rows and not isinstance(rows[0], Sequence):
        return [[float(v) for v in rows]]
    return [[float(v) for v in row] for row in rows]


def _mean(values: Sequence[float]) -> float:
    """An exact mean of finite values; IEEE arithmetic where fsum refuses (inf − inf, an
    intermediate overflow)."""
    try:
        return math.fsum(values) / len(values)
    except (OverflowError, ValueError):
        return sum(values) / len(values)


def _extreme(values: list[float], pick: Callable[[list[float]], float]) -> float:
    """max/min that returns NaN when any value is NaN, as NumPy's and torch's do."""
    return math.nan if any(math.isnan(v) for v in values) else float(pick(values))


def compute(rollout_logprobs: Any, trainer_logprobs: Any, mask: Any = None) -> dict[str, float]:
    """The plain-Python metrics of one step from lists (see the module docstring)."""
    lr, lt = _rows(rollout_logprobs), _rows(trainer_logprobs)
    keep = _rows(mask) if mask is not None else [[1.0] * len(row) for row in lr]
    shapes = {tuple(len(r) for r in grid) for grid in (lr, lt, keep)}
    if len(shapes) != 1:
        raise ValueError("rollout logprobs, trainer logprobs and mask differ in shape")
    seqs = [
        [(a, t) for a, t, m in zip(ra, rt, rm, strict=True) if m]
        for ra, rt, rm in zip(lr, lt, keep, strict=True)
    ]
    seqs = [s for s in seqs if s]
    if not seqs:
        return dict.fromkeys(EMPTY_STEP, 0.0)
    per_seq = [[_per_token(a, t) for a, t in s] for s in seqs]
    tokens = [tok for s in per_seq for tok in s]
    out: dict[str, float] = {}
    for name in PER_TOKEN:
        out[name] = _mean([tok[name] for tok in tokens])
        out[seq_form(name)] = _mean([_mean([tok[name] for tok in s]) for s in per_seq])
    out["ratio_dev_1e4"] = (out["ratio_mean"] - 1) * 1e4
    out[seq_form("ratio_dev_1e4")] = (out[seq_form("ratio_mean")] - 1) * 1e4
    ratios = [tok["ratio_mean"] for tok in tokens]
    out["ratio_std"] = math.sqrt(_mean([(r - out["ratio_mean"]) ** 2 for r in ratios]))
    out["ratio_min"] = _extreme(ratios, min)
    out["ratio_max"] = _extreme(ratios, max)
    out["k3_kl_max"] = _extreme([tok["k3_kl"] for tok in tokens], max)
    out["abs_logp_diff_max"] = _extreme([tok["abs_logp_diff_mean"] for tok in tokens], max)
    pairs = [pair for s in seqs for pair in s]
    out["nonfinite_tokens"] = float(
        sum(not (math.isfinite(a) and math.isfinite(t)) for a, t in pairs)
    )
    out["tokens"] = float(len(tokens))
    out["sequences"] = float(len(seqs))
    return out
