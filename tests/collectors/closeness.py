"""How the collectors' metrics are held against the float64 reference (reference.py).

The NumPy and torch paths compute in float32 on inputs the tests give in float32, so the
reference sees the very same numbers and the difference is float32 arithmetic alone. What that
arithmetic may cost depends on what a metric sums: a mean of k3 is as good as the ratios and log
ratios it is made of, a sequence's product ratio as good as the sum of |d| it exponentiates. So
each metric is allowed ROUNDING times the magnitude of what it is made of (`allowance`), plus its
own value times ROUNDING; nothing looser. A rate is held between the reference's values with its
bounds moved in and out by MARGIN (a token on a bound may fall either side in float32). The
plain-Python path computes in float64 and is held to 1e-9.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from collectors import StepSummary, _pure, compute_step_metrics
from collectors._vocabulary import BUCKET_COLUMNS
from tests.collectors.reference import CLAMP, EDGES, Sequence, bucket_of, sequences

ROUNDING = 4e-6
"""About 64 float32 ulps: a few exps and a pairwise sum of thousands of terms stay within it."""
ATOL = 1e-15
"""What the reference's own float64 loses where it spells exp(d) − 1 − d for a d near 0."""
MARGIN = 1e-4
"""How far from a bound, in log ratio, a float32 token may land on the other side of it."""

FLOAT32_MAX = float(np.finfo(np.float32).max)

PATHS = ["numpy", "torch"] + (["cuda"] if torch.cuda.is_available() else [])
"""The array paths of compute_step_metrics this machine can run."""


def summary(path: str, lr: Any, lt: Any, mask: Any = None, **optional: Any) -> StepSummary:
    """compute_step_metrics by one array path: "numpy", "torch" (CPU tensors) or "cuda"."""
    if path == "numpy":
        return compute_step_metrics(lr, lt, mask, **optional)
    device = "cuda" if path == "cuda" else "cpu"

    def tensor(x: Any) -> Any:
        return None if x is None else torch.as_tensor(np.asarray(x), device=device)

    given = {k: v if k == "trainer_buckets" else tensor(v) for k, v in optional.items()}
    return compute_step_metrics(tensor(lr), tensor(lt), tensor(mask), **given)


def run(path: str, lr: Any, lt: Any, mask: Any = None, **optional: Any) -> dict[str, float]:
    """The metrics of one step by one path: an array path of `summary`, or "pure"."""
    if path != "pure":
        return summary(path, lr, lt, mask, **optional).metrics
    assert not optional, "the plain-Python path takes logprobs and a mask only"
    as_list = lambda x: None if x is None else np.asarray(x).tolist()  # noqa: E731
    return _pure.compute(as_list(lr), as_list(lt), as_list(mask))


def allowance(
    lr: Any, lt: Any, mask: Any = None, *, new: Any = None, ent: Any = None
) -> dict[str, float]:
    """Per metric, the magnitude of what a float32 computation of it is made of: a value is
    allowed ROUNDING times this (see the module docstring). Rates and counts have none: a rate is
    bracketed, a count is exact."""
    seqs = sequences(lr, lt, mask, new=new, ent=ent)
    if not seqs:
        return {}
    with np.errstate(all="ignore"):
        out = _allowance(seqs)
        if new is not None:
            lt_all = np.concatenate([s.lt for s in seqs])
            dn = np.clip(
                np.concatenate([s.new for s in seqs if s.new is not None]) - lt_all, -CLAMP, CLAMP
            )
            out["kl_new_old"] = float(np.mean(_z(np.abs(np.expm1(dn)) + np.abs(dn))))
        if ent is not None:
            h = np.concatenate([s.ent for s in seqs if s.ent is not None])
            out["entropy"] = float(np.mean(_z(np.abs(h))))
            mean_h = abs(float(np.mean(h)))
            out["kl_entropy_ratio"] = (
                out["k3_kl"] + out["entropy"] * out["k3_kl"] / mean_h
            ) / mean_h
    return out


def bucket_allowance(lr: Any, lt: Any, mask: Any, basis: str = "rollout") -> dict[str, list[float]]:
    """Per bucket, the allowance of each column's sum: Σ|d| for the sums of d and |d|, the sum
    of k3's float32 parts for the sums of k3 and reverse k3."""
    table: dict[str, list[float]] = {name: [0.0] * (len(EDGES) - 1) for name in BUCKET_COLUMNS}
    with np.errstate(all="ignore"):
        for s in sequences(lr, lt, mask):
            for a, t in zip(s.lr, s.lt, strict=True):
                b = bucket_of(np.exp(a if basis == "rollout" else t))
                if b is None:
                    continue
                x = np.clip(t - a, -CLAMP, CLAMP)
                table["sum_d"][b] += float(abs(t - a))
                table["sum_abs_d"][b] += float(abs(t - a))
                table["sum_k3"][b] += float(abs(np.expm1(x)) + abs(x))
                table["sum_reverse_k3"][b] += float(abs(np.expm1(-x)) + abs(x))
    return table


def _z(x: Any) -> Any:
    """Parts with NaN read as 0: in a metric that came out finite, a NaN part is 0 · inf (a
    sequence whose exp(−mean l) is 0, say), which contributed nothing."""
    return np.where(np.isnan(x), 0.0, x)


def _allowance(seqs: list[Sequence]) -> dict[str, float]:
    lr = np.concatenate([s.lr for s in seqs])
    lt = np.concatenate([s.lt for s in seqs])
    d = lt - lr
    dc = np.clip(d, -CLAMP, CLAMP)
    r, inv = np.exp(dc), np.exp(-dc)
    p_t, p_r = np.exp(lt), np.exp(lr)
    log_half = np.log(0.5 * (p_t + p_r))
    js = 0.0
    for lp in (lt, lr):  # k3 of x = log M − l: x is as good as log M and l are, and so is k3
        x, level = log_half - lp, 1 + np.abs(log_half) + np.abs(lp)
        js = js + (np.abs(np.expm1(x)) + np.abs(x) + ROUNDING * level) * level
    per_token = {  # each headline quantity's float32 parts, token by token
        "k1_kl": np.abs(d),
        "k2_kl": d * d,
        "k3_kl": np.abs(r - 1) + np.abs(dc),
        "reverse_k3_kl": np.abs(inv - 1) + np.abs(dc),
        "ratio_mean": np.abs(r - 1) + 1,
        "ratio_abs_dev": np.abs(r - 1) + 1,
        "abs_logp_diff_mean": np.abs(d),
        "mult_prob_error": np.exp(np.abs(dc)),
        "prob_diff_mean": p_t + p_r,
        "js_div": js,
    }
    per_token = {name: _z(parts) for name, parts in per_token.items()}
    out: dict[str, float] = {}
    bounds = np.cumsum([len(s.lr) for s in seqs])[:-1]
    for name, parts in per_token.items():
        per_seq = np.mean([np.mean(x) for x in np.split(parts, bounds)])
        out[name] = out[name + "_seq"] = float(max(np.mean(parts), per_seq))
    out["ratio_dev_1e4"] = 1e4 * out["ratio_mean"]
    out["ratio_dev_1e4_seq"] = 1e4 * out["ratio_mean_seq"]
    out["k3_kl_max"] = out["k3_kl_p99"] = float(np.max(per_token["k3_kl"]))
    out["ratio_std"] = float(np.max(per_token["ratio_mean"]))
    out["abs_logp_diff_max"] = out["abs_logp_diff_std"] = float(np.max(per_token["k1_kl"]))
    out["prob_diff_max"] = float(np.max(per_token["prob_diff_mean"]))
    spread = min(float(np.std(p_t)), float(np.std(p_r)))
    out["prob_pearson"] = out["prob_diff_max"] / spread if spread > 0 else math.inf
    out["chi2_token"] = float(np.mean(_z(r * r + 1)))

    # a sequence's Σd is as good as its Σ|d|, and its exp (r_seq) is that good relatively
    sum_d = np.array([np.sum(s.lt - s.lr) for s in seqs])
    sum_abs = _z(np.array([np.sum(np.abs(s.lt - s.lr)) for s in seqs]))
    r_seq = np.exp(np.clip(sum_d, -CLAMP, CLAMP))
    level_t = np.array([np.mean(np.abs(s.lt)) for s in seqs])
    level_r = np.array([np.mean(np.abs(s.lr)) for s in seqs])
    mean_lt = np.array([np.mean(s.lt) for s in seqs])
    mean_lr = np.array([np.mean(s.lr) for s in seqs])
    log_ppl = np.clip(mean_lr - mean_lt, -CLAMP, CLAMP)
    by_seq = {
        "chi2_seq": r_seq * r_seq * (1 + 2 * sum_abs) + 1,
        "ppl_trainer": np.exp(-mean_lt) * (1 + level_t),
        "ppl_rollout": np.exp(-mean_lr) * (1 + level_r),
        "log_ppl_diff": level_t + level_r,
        "log_ppl_abs_diff": level_t + level_r,
        "ppl_ratio": np.exp(log_ppl) * (1 + level_t + level_r),
        "seq_ratio_mean": r_seq * (1 + sum_abs),
    }
    out |= {name: float(np.mean(_z(parts))) for name, parts in by_seq.items()}
    out["seq_ratio_max"] = float(np.max(_z(r_seq * (1 + sum_abs))))
    out["seq_log_ratio_abs_max"] = float(np.max(sum_abs))
    out["ess_seq"] = 2 * out["seq_log_ratio_abs_max"]
    return out


def assert_close(
    got: dict[str, float],
    want: dict[str, Any],
    *,
    allow: dict[str, float] | None = None,
    band: tuple[dict[str, Any], dict[str, Any]] | None = None,
    rel: float = ROUNDING,
    atol: float = ATOL,
    names: set[str] | None = None,
) -> None:
    """Each of `names` (default: every metric of `want`) in `got` equals the reference's: the
    same NaN, the same infinity, or a finite value within `rel` of it plus `rel` times its
    allowance; a rate whose reference moves with `band` (reference(..., margin=±MARGIN)) lies
    between the two."""
    names = set(want) - {"buckets"} if names is None else names
    assert names <= set(got), sorted(names - set(got))
    for name in sorted(names):
        g, w = got[name], float(want[name])
        if math.isinf(g) and abs(w) > FLOAT32_MAX / 1024 and (g > 0) == (w > 0):
            continue  # beyond float32's range, or a sum of a few values near its end
        if math.isnan(w) or math.isinf(w):
            assert g == w or (math.isnan(g) and math.isnan(w)), (name, g, w)
            continue
        if band is not None:
            lo, hi = sorted(float(b[name]) for b in band)
            if lo != hi:
                assert lo - rel * lo - atol <= g <= hi + rel * hi + atol, (name, g, lo, hi)
                continue
        extra = (allow or {}).get(name, 0.0)
        assert not math.isnan(extra), f"no allowance for {name} on these inputs"
        tolerance = rel * (abs(w) + extra) + atol
        assert g == pytest.approx(w, rel=0, abs=tolerance), (name, g, w)


def assert_buckets_close(
    got: dict[str, Any],
    want: dict[str, list[float]],
    *,
    allow: dict[str, list[float]],
    band: tuple[dict[str, list[float]], dict[str, list[float]]] | None = None,
) -> None:
    """A bucket table equals the reference's: token counts exactly, out-of-bounds counts within
    `band` (the reference's tables with margin ±MARGIN), sums within ROUNDING of their
    allowance."""
    assert got["tokens"] == want["tokens"]
    for b, oob in enumerate(got["oob"]):
        bounds = sorted(t["oob"][b] for t in band) if band else [want["oob"][b]] * 2
        assert bounds[0] <= oob <= bounds[1], ("oob", b, oob, bounds)
    for name in ("sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3"):
        for b, (g, w) in enumerate(zip(got[name], want[name], strict=True)):
            if math.isnan(w) or math.isinf(w):
                assert g == w or (math.isnan(g) and math.isnan(w)), (name, b, g, w)
                continue
            tolerance = ROUNDING * (abs(w) + allow[name][b]) + ATOL
            assert g == pytest.approx(w, rel=0, abs=tolerance), (name, b, g, w)
