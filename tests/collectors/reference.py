"""An independent float64 reference of the step metrics, written from METRICS.md's formulas.

Nothing here comes from collectors/: the tests hold the collectors' paths (NumPy and torch in
`compute_step_metrics`, plain Python in `collectors._pure`) against it. It is written to be read
beside METRICS.md, not to be fast: each sequence's valid tokens are gathered into float64 arrays
(ragged, no padding, no mask arithmetic), and each formula is spelled as METRICS.md writes it —
exp(d) − 1 − d rather than expm1, r ∉ [c, C] as a comparison of the log ratio with log c and
log C.

Where METRICS.md leaves a reading open, this one is taken:
- "Clamp d to ±20 before any exp": a metric that exponentiates d, or a sum or a mean of d, uses
  the clamped value throughout its formula (verl clamps the log ratio first); statistics of d
  itself (k1, k2, |d|, Σ_t d) use d as given.
- k3(a‖b) = exp(b − a) − 1 − (b − a), the estimator of KL from a sample of the first policy:
  k3_kl = k3(lR‖lT), js_div = ½k3(lT‖log M) + ½k3(lR‖log M), kl_new_old = k3(lT‖lN).
- A std is the population std of the step's tokens; the 99th percentile interpolates linearly
  between order statistics.
- Inputs are IEEE floats: NaN and ±Inf are kept and propagate through arithmetic and through
  max, min and the percentile. A rate counts the tokens (sequences) known to lie beyond a bound,
  which a NaN does not. `nonfinite_tokens` counts valid tokens with a non-finite lR or lT.
- A bucket's index is the number of inner edges at or below pR, so bucket b holds
  edges[b] ≤ pR < edges[b + 1] and the last one also pR = 1; tokens with a non-finite pR are left
  out of the table.
- The `_seq` form exists for the token means of the per-token quantities below (`PER_TOKEN`)
  and for ratio_dev_1e4: METRICS.md calls them the headline scalars without listing them, so the
  tests check that the collectors' vocabulary names the same ones.
- A step with no valid token has only tokens = sequences = 0.

`margin` moves every bound of a rate outward (> 0) or inward (< 0) by that much in log space, so
that a test can bracket a float32 computation whose tokens sit on a bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

CLAMP = 20.0
EDGES = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 0.5, 0.9, 1.0)
Array = np.ndarray


def clamped(x: Array) -> Array:
    return np.clip(x, -CLAMP, CLAMP)


def k3(a: Array, b: Array) -> Array:
    """k3(a‖b) on log-probabilities, the log ratio clamped before the exp."""
    x = clamped(b - a)
    return np.exp(x) - 1 - x


def log_bound(value: float) -> float:
    return math.log(value) if value > 0 else -math.inf


PER_TOKEN: dict[str, Callable[[Array, Array], Array]] = {
    "k1_kl": lambda lr, lt: lr - lt,
    "k2_kl": lambda lr, lt: 0.5 * (lt - lr) ** 2,
    "k3_kl": lambda lr, lt: k3(lr, lt),
    "reverse_k3_kl": lambda lr, lt: np.exp(-clamped(lt - lr)) - 1 + clamped(lt - lr),
    "ratio_mean": lambda lr, lt: np.exp(clamped(lt - lr)),
    "ratio_abs_dev": lambda lr, lt: np.abs(np.exp(clamped(lt - lr)) - 1),
    "abs_logp_diff_mean": lambda lr, lt: np.abs(lt - lr),
    "mult_prob_error": lambda lr, lt: np.exp(np.abs(clamped(lt - lr))),
    "prob_diff_mean": lambda lr, lt: np.abs(np.exp(lt) - np.exp(lr)),
    "js_div": lambda lr, lt: (
        0.5 * k3(lt, np.log(0.5 * (np.exp(lt) + np.exp(lr))))
        + 0.5 * k3(lr, np.log(0.5 * (np.exp(lt) + np.exp(lr))))
    ),
}
"""Per-token quantities whose token mean is a metric of METRICS.md's first table, by its name."""


@dataclass(frozen=True)
class Sequence:
    """One sequence's valid tokens, in float64."""

    lr: Array
    lt: Array
    new: Array | None
    adv: Array | None
    ent: Array | None


def sequences(
    lr: Any,
    lt: Any,
    mask: Any = None,
    new: Any = None,
    adv: Any = None,
    ent: Any = None,
) -> list[Sequence]:
    """The sequences with at least one valid token; 1-D inputs are one sequence, advantages
    come per sequence ([S]) or per token ([S, T])."""

    def grid(x: Any) -> Array | None:
        if x is None:
            return None
        a = np.array(x, dtype=np.float64)
        return a.reshape(1, -1) if a.ndim == 1 else a

    g_lr, g_lt, g_new, g_ent = grid(lr), grid(lt), grid(new), grid(ent)
    assert g_lr is not None and g_lt is not None and g_lr.shape == g_lt.shape
    keep = np.ones(g_lr.shape, bool) if mask is None else np.array(mask, bool).reshape(g_lr.shape)
    a = None if adv is None else np.array(adv, dtype=np.float64)
    out = []
    for i in range(g_lr.shape[0]):
        m = keep[i]
        if not m.any():
            continue
        per_token_adv = None
        if a is not None:
            per_token_adv = a[i][m] if a.ndim == 2 else np.full(int(m.sum()), a[i])
        out.append(
            Sequence(
                g_lr[i][m],
                g_lt[i][m],
                None if g_new is None else g_new[i][m],
                per_token_adv,
                None if g_ent is None else g_ent[i][m],
            )
        )
    return out


def mean(x: Array) -> Any:
    """A float64 mean with IEEE arithmetic (0/0 is NaN, not an exception)."""
    return np.float64(np.sum(x)) / len(x)


def percentile(x: Array, q: float) -> float:
    """Linear interpolation between order statistics; NaN when any value is NaN."""
    if np.isnan(x).any():
        return math.nan
    s = sorted(float(v) for v in x)
    h = q / 100 * (len(s) - 1)
    lo = math.floor(h)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])


def std(x: Array) -> Any:
    return np.sqrt(mean((x - mean(x)) ** 2))


def beyond(x: Array, lo: float, hi: float, margin: float) -> Array:
    """Log ratios x below the bound lo or above hi (both ratios, not logs)."""
    return (x < log_bound(lo) - margin) | (x > log_bound(hi) + margin)


def reference(
    lr: Any,
    lt: Any,
    mask: Any = None,
    *,
    new: Any = None,
    adv: Any = None,
    ent: Any = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    cap: float = 2.0,
    floor: float | None = None,
    seq_cap: float = 5.0,
    geo: tuple[float, float] = (0.999, 1.001),
    edges: tuple[float, ...] = EDGES,
    margin: float = 0.0,
) -> dict[str, Any]:
    """Every step metric METRICS.md defines for these inputs, and the rollout-basis bucket table
    under "buckets"."""
    seqs = sequences(lr, lt, mask, new, adv, ent)
    if not seqs:
        return {"tokens": 0.0, "sequences": 0.0}
    c = floor if floor is not None else 1 / cap
    with np.errstate(all="ignore"):
        out = _tokens(seqs, clip_low, clip_high, margin)
        out |= _sequences(seqs)
        out |= _correction(seqs, c, cap, seq_cap, geo, margin)
        out |= _update(seqs, clip_low, clip_high, margin, out["k3_kl"])
        out = {name: float(value) for name, value in out.items()}
        out["buckets"] = bucket_table(seqs, "rollout", c, cap, edges, margin)
    return out


def _tokens(seqs: list[Sequence], clip_low: float, clip_high: float, m: float) -> dict[str, Any]:
    lr = np.concatenate([s.lr for s in seqs])
    lt = np.concatenate([s.lt for s in seqs])
    out: dict[str, Any] = {}
    for name, f in PER_TOKEN.items():
        out[name] = mean(f(lr, lt))
        out[name + "_seq"] = float(np.mean([mean(f(s.lr, s.lt)) for s in seqs]))
    out["ratio_dev_1e4"] = (out["ratio_mean"] - 1) * 1e4
    out["ratio_dev_1e4_seq"] = (out["ratio_mean_seq"] - 1) * 1e4

    d = lt - lr
    r = np.exp(clamped(d))
    k3s = np.exp(clamped(d)) - 1 - clamped(d)
    out["k3_kl_max"] = float(np.max(k3s))
    out["k3_kl_p99"] = percentile(k3s, 99)
    out["ratio_std"] = std(r)
    out["ratio_min"], out["ratio_max"] = float(np.min(r)), float(np.max(r))
    out["abs_logp_diff_max"] = float(np.max(np.abs(d)))
    out["abs_logp_diff_std"] = std(np.abs(d))
    p_t, p_r = np.exp(lt), np.exp(lr)
    out["prob_diff_max"] = float(np.max(np.abs(p_t - p_r)))
    dev_t, dev_r = p_t - mean(p_t), p_r - mean(p_r)
    out["prob_pearson"] = mean(dev_t * dev_r) / np.sqrt(mean(dev_t**2) * mean(dev_r**2))
    out["chi2_token"] = mean(r**2) - 1
    out["rollout_clip_rate"] = mean(beyond(clamped(d), 1 - clip_low, 1 + clip_high, m))
    out["tokens"] = float(len(lr))
    out["sequences"] = float(len(seqs))
    out["nonfinite_tokens"] = float(np.sum(~(np.isfinite(lr) & np.isfinite(lt))))
    return out


def _sequences(seqs: list[Sequence]) -> dict[str, float]:
    sums = np.array([np.sum(s.lt - s.lr) for s in seqs])
    mean_lt = np.array([mean(s.lt) for s in seqs])
    mean_lr = np.array([mean(s.lr) for s in seqs])
    log_ppl = mean_lr - mean_lt
    return {
        "chi2_seq": mean(np.exp(2 * clamped(sums))) - 1,
        "ppl_trainer": mean(np.exp(-mean_lt)),
        "ppl_rollout": mean(np.exp(-mean_lr)),
        "log_ppl_diff": mean(log_ppl),
        "log_ppl_abs_diff": mean(np.abs(log_ppl)),
        "ppl_ratio": mean(np.exp(clamped(log_ppl))),
    }


def _correction(
    seqs: list[Sequence],
    c: float,
    cap: float,
    seq_cap: float,
    geo: tuple[float, float],
    m: float,
) -> dict[str, float]:
    x = clamped(np.concatenate([s.lt - s.lr for s in seqs]))  # log r per token
    r = np.exp(x)
    sums = np.array([np.sum(s.lt - s.lr) for s in seqs])
    x_seq = clamped(sums)  # log r_seq
    r_seq = np.exp(x_seq)
    x_geo = clamped(np.array([mean(s.lt - s.lr) for s in seqs]))  # log r_geo
    # ∃t: r_t < 1e-4 or r_t > 100
    vetoed = np.array([beyond(clamped(s.lt - s.lr), 1e-4, 100.0, m).any() for s in seqs])
    w_clamped = np.clip(r, c, cap)
    return {
        "tis_token_rate": mean(beyond(x, 0.0, cap, m)),
        "mis_token_rate": mean(beyond(x, c, cap, m)),
        "mis_token_rate_low": mean(beyond(x, c, math.inf, m)),
        "mis_token_rate_high": mean(beyond(x, 0.0, cap, m)),
        "tis_seq_rate": mean(beyond(x_seq, 0.0, seq_cap, m)),
        "mis_seq_rate": mean(beyond(x_seq, c, cap, m)),
        "geo_mis_seq_rate": mean(beyond(x_geo, geo[0], geo[1], m)),
        "veto_token_rate": mean(beyond(x, 1e-4, math.inf, m)),
        "veto_seq_rate": mean(vetoed),
        "ess_token": float(np.sum(r) ** 2 / (len(r) * np.sum(r**2))),
        "ess_token_clamped": float(np.sum(w_clamped) ** 2 / (len(r) * np.sum(w_clamped**2))),
        "ess_seq": float(np.sum(r_seq) ** 2 / (len(r_seq) * np.sum(r_seq**2))),
        "seq_ratio_mean": mean(r_seq),
        "seq_ratio_max": float(np.max(r_seq)),
        "seq_log_ratio_abs_max": float(np.max(np.abs(sums))),
    }


def _update(
    seqs: list[Sequence], clip_low: float, clip_high: float, m: float, k3_kl: float
) -> dict[str, float]:
    out: dict[str, float] = {}
    if seqs[0].new is not None:
        lt = np.concatenate([s.lt for s in seqs])
        x = clamped(np.concatenate([s.new for s in seqs if s.new is not None]) - lt)  # log ρ
        out["kl_new_old"] = mean(k3(lt, lt + x))
        out["clip_rate"] = mean(beyond(x, 1 - clip_low, 1 + clip_high, m))
        if seqs[0].adv is not None:
            a = np.concatenate([s.adv for s in seqs if s.adv is not None])
            out["clip_rate_low"] = mean(beyond(x, 1 - clip_low, math.inf, m) & (a < 0))
            out["clip_rate_high"] = mean(beyond(x, 0.0, 1 + clip_high, m) & (a > 0))
    if seqs[0].ent is not None:
        out["entropy"] = mean(np.concatenate([s.ent for s in seqs if s.ent is not None]))
        out["kl_entropy_ratio"] = k3_kl / out["entropy"]
    return out


def bucket_of(p: float, edges: tuple[float, ...] = EDGES) -> int | None:
    """The bucket of probability p: the number of inner edges at or below it; None for a p
    that is not finite (such a token is left out of the table)."""
    if not np.isfinite(p):
        return None
    return sum(1 for edge in edges[1:-1] if edge <= p)


def bucket_table(
    seqs: list[Sequence],
    basis: str,
    c: float = 0.5,
    cap: float = 2.0,
    edges: tuple[float, ...] = EDGES,
    margin: float = 0.0,
) -> dict[str, list[float]]:
    """Per probability bucket (on pR, or pT for basis "trainer"): tokens, Σd, Σ|d|, Σk3,
    Σ reverse k3, and the count of r ∉ [c, C]."""
    columns = ("tokens", "sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3", "oob")
    table = {name: [0.0] * (len(edges) - 1) for name in columns}
    with np.errstate(all="ignore"):
        for s in seqs:
            for a, t in zip(s.lr, s.lt, strict=True):
                b = bucket_of(np.exp(a if basis == "rollout" else t), edges)
                if b is None:
                    continue
                d = t - a
                x = clamped(d)
                table["tokens"][b] += 1
                table["sum_d"][b] += float(d)
                table["sum_abs_d"][b] += float(abs(d))
                table["sum_k3"][b] += float(np.exp(x) - 1 - x)
                table["sum_reverse_k3"][b] += float(np.exp(-x) - 1 + x)
                table["oob"][b] += float(beyond(x, c, cap, margin))
    return table
