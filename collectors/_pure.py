"""The headline mismatch metrics in plain Python, for a host with neither NumPy nor torch.

`mismatch-collectors` has no required dependencies, so `log_step` must still do something
useful with plain lists. This path covers the token-level headline metrics (and the k1/k3
sequence means) with the same definitions as `_metrics` (see its docstring: d = lT − lR, ±20
clamp before an exp, population std, NaN propagates), in float64 loops; the full set (buckets,
correction diagnostics, update metrics) needs NumPy or torch, which the `numpy` and `torch`
extras install.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from collectors._metrics import CLAMP

METRICS = (
    "k1_kl",
    "k2_kl",
    "k3_kl",
    "reverse_k3_kl",
    "ratio_mean",
    "ratio_abs_dev",
    "abs_logp_diff_mean",
    "mult_prob_error",
)


def _rows(x: Any) -> list[list[float]]:
    """A padded [sequences][tokens] grid; a flat list is one sequence."""
    rows = list(x)
    if rows and not isinstance(rows[0], Sequence):
        return [[float(v) for v in rows]]
    return [[float(v) for v in row] for row in rows]


def _extreme(values: list[float], pick: Any) -> float:
    """max/min that returns NaN when any value is NaN, as NumPy's do."""
    return math.nan if any(math.isnan(v) for v in values) else float(pick(values))


def _token(lr: float, lt: float) -> dict[str, float]:
    d = lt - lr
    dc = d if math.isnan(d) else min(max(d, -CLAMP), CLAMP)
    r = math.exp(dc)
    return {
        "k1_kl": -d,
        "k2_kl": d * d / 2,
        "k3_kl": r - 1 - dc,
        "reverse_k3_kl": math.exp(-dc) - 1 + dc,
        "ratio_mean": r,
        "ratio_abs_dev": abs(r - 1),
        "abs_logp_diff_mean": abs(d),
        "mult_prob_error": math.exp(abs(dc)),
    }


def compute(rollout_logprobs: Any, trainer_logprobs: Any, mask: Any = None) -> dict[str, float]:
    """The headline metrics of one step from lists (see the module docstring)."""
    lr, lt = _rows(rollout_logprobs), _rows(trainer_logprobs)
    keep = _rows(mask) if mask is not None else [[1.0] * len(row) for row in lr]
    if [len(r) for r in lr] != [len(r) for r in lt] or [len(r) for r in lr] != [
        len(r) for r in keep
    ]:
        raise ValueError("rollout logprobs, trainer logprobs and mask differ in shape")
    seqs = [
        [_token(a, t) for a, t, m in zip(ra, rt, rm, strict=True) if m]
        for ra, rt, rm in zip(lr, lt, keep, strict=True)
    ]
    seqs = [s for s in seqs if s]
    tokens = [tok for s in seqs for tok in s]
    n = len(tokens)
    if n == 0:
        return {"tokens": 0.0, "sequences": 0.0}
    out = {name: math.fsum(t[name] for t in tokens) / n for name in METRICS}
    ratios = [t["ratio_mean"] for t in tokens]
    k3 = [t["k3_kl"] for t in tokens]
    abs_d = [t["abs_logp_diff_mean"] for t in tokens]
    mean_r = out["ratio_mean"]
    out["ratio_std"] = math.sqrt(math.fsum((r - mean_r) ** 2 for r in ratios) / n)
    out["ratio_min"] = _extreme(ratios, min)
    out["ratio_max"] = _extreme(ratios, max)
    out["ratio_dev_1e4"] = (mean_r - 1) * 1e4
    out["k3_kl_max"] = _extreme(k3, max)
    out["abs_logp_diff_max"] = _extreme(abs_d, max)
    for name in ("k1_kl", "k3_kl"):
        per_seq = [math.fsum(t[name] for t in s) / len(s) for s in seqs]
        out[f"{name}_seq"] = math.fsum(per_seq) / len(per_seq)
    out["nonfinite_tokens"] = float(sum(not math.isfinite(t["k1_kl"]) for t in tokens))
    out["tokens"] = float(n)
    out["sequences"] = float(len(seqs))
    return out
