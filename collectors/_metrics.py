"""The training-inference mismatch metrics of one step (../METRICS.md in the design docs).

`compute_step_metrics` is pure: tensors in, a `StepSummary` of plain floats out. It runs with
torch on the tensors' own device (CPU or CUDA) or with NumPy, in float32, on the padded
[sequences, tokens] grid (row sums, no scatters). Besides the token and sequence counts, a few
single values cross to the host to pick a cheaper path (a tie at the p99 rank, a masked extreme,
non-finite probabilities); the metrics themselves move in one transfer at the end.

Choices where the frameworks differ, made once here:
- d = lT − lR (trainer over rollout). Metrics that exponentiate d use d clamped to ±20 (verl,
  slime, SkyRL); the others (k1, k2, |d| statistics, sums of d) use d as given, so a |d| of 50 is
  reported as 50.
- Headline scalars come as a token mean (bare name; verl, TRL) and as a mean over sequences of
  each sequence's token mean (`_seq`; slime, PipelineRL). Sequences with no valid token are left
  out of sequence means and of `sequences`.
- ratio_std is the population standard deviation over tokens.
- kl_new_old is the k3 estimator between the new policy and the old one, with
  d_new = lN − lT, like k3_kl with d = lT − lR.
- js_div uses k3(a‖M) = exp(log M − a) − 1 − (log M − a), averaged over both sides.
- NaN or ±Inf in an input is not dropped: it propagates into every metric it touches (a collapse
  shows up as NaN, which the server stores and alarms on), and `nonfinite_tokens` counts such
  tokens. Bucket tables leave out tokens whose binned probability is not finite.
- A step with no valid token yields only `tokens` = 0 and `sequences` = 0: nothing else is
  defined, so nothing else is reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_EDGES: tuple[float, ...] = (0.0, 1e-4, 1e-3, 1e-2, 1e-1, 0.5, 0.9, 1.0)
CLAMP = 20.0
VETO_LOW = 1e-4
VETO_HIGH = 100.0

SEQ_FORMS = (
    "k1_kl",
    "k2_kl",
    "k3_kl",
    "reverse_k3_kl",
    "ratio_mean",
    "ratio_abs_dev",
    "abs_logp_diff_mean",
    "mult_prob_error",
    "prob_diff_mean",
    "js_div",
)


@dataclass(frozen=True)
class StepSummary:
    """Per-step scalars (`metrics`) and probability-bucket tables in the wire shape."""

    metrics: dict[str, float]
    buckets: list[dict[str, Any]] = field(default_factory=list)


def merge_buckets(tables: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add bucket tables of the same basis and edges (from several actors or steps)."""
    merged: dict[tuple[str, tuple[float, ...]], dict[str, Any]] = {}
    sums = ("tokens", "sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3", "oob")
    for table in tables:
        key = (table["basis"], tuple(table["edges"]))
        if key not in merged:
            merged[key] = {
                "basis": key[0],
                "edges": list(key[1]),
                **{s: list(table[s]) for s in sums},
            }
            continue
        into = merged[key]
        for s in sums:
            into[s] = [a + b for a, b in zip(into[s], table[s], strict=True)]
    return list(merged.values())


# -- array backends ------------------------------------------------------------------------


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


class _Ops:
    """The few array operations the metrics need, for torch or NumPy."""

    def __init__(self, use_torch: bool, device: Any = None) -> None:
        self.torch = use_torch
        if use_torch:
            import torch

            self.xp: Any = torch
            self.device = device
        else:
            import numpy

            self.xp = numpy
            self.device = None

    def f32(self, x: Any) -> Any:
        if self.torch:
            t = self.xp
            if not isinstance(x, t.Tensor):
                x = t.as_tensor(x)
            return x.to(device=self.device, dtype=t.float32)
        import numpy as np

        if _is_torch(x):
            x = x.detach().float().cpu().numpy()
        return np.asarray(x, dtype=np.float32)

    def as_bool(self, x: Any) -> Any:
        if self.torch:
            t = self.xp
            if not isinstance(x, t.Tensor):
                x = t.as_tensor(x)
            x = x.to(device=self.device)
            return x if x.dtype == t.bool else x != 0
        import numpy as np

        if _is_torch(x):
            x = x.detach().cpu().numpy()
        x = np.asarray(x)
        return x if x.dtype == np.bool_ else x != 0

    def as_int(self, x: Any) -> Any:
        if self.torch:
            t = self.xp
            return t.as_tensor(x, device=self.device).to(t.int64)
        import numpy as np

        if _is_torch(x):
            x = x.detach().cpu().numpy()
        return np.asarray(x, dtype=np.int64)

    def arange(self, n: int) -> Any:
        if self.torch:
            return self.xp.arange(n, device=self.device)
        return self.xp.arange(n)

    def clamp(self, x: Any, lo: float | None, hi: float | None) -> Any:
        if self.torch:
            return self.xp.clamp(x, lo, hi)
        return self.xp.clip(x, lo, hi)

    def where(self, cond: Any, x: Any, other: float) -> Any:
        if self.torch:
            return self.xp.where(cond, x, self.xp.as_tensor(other, dtype=x.dtype, device=x.device))
        return self.xp.where(cond, x, self.xp.float32(other))

    def float32(self, x: Any) -> Any:
        return x.to(self.xp.float32) if self.torch else x.astype(self.xp.float32)

    def bucket_sums(self, idx: Any, weights: Sequence[Any], k: int) -> Any:
        """Sums of each weight grid per bucket index in 0..k-1: a [len(weights), k] array."""
        if self.torch:
            t = self.xp
            stacked = t.stack([w.reshape(-1) for w in weights])
            out = t.zeros((len(weights), k), dtype=stacked.dtype, device=stacked.device)
            return out.index_add_(1, idx.reshape(-1), stacked)
        flat = idx.reshape(-1)
        return self.xp.stack(
            [self.xp.bincount(flat, weights=w.reshape(-1), minlength=k) for w in weights]
        )

    def quantile_top(self, x: Any, n: int, q: float) -> Any:
        """The q-quantile (linear interpolation, NumPy's default) of the n largest entries of x,
        found by selection, not by sorting. The other entries must not be larger than these:
        padding, where every per-token quantity is 0, below a quantity that is never negative."""
        flat = x.reshape(-1)
        skip = int(flat.shape[0]) - n
        pos = q * (n - 1)
        lo = math.floor(pos)
        hi = min(n - 1, lo + 1)
        if self.torch:
            t = self.xp
            a = t.kthvalue(flat, skip + lo + 1).values
            b = a
            if hi > lo and int((flat <= a).sum()) <= skip + hi:  # rank hi holds a larger value
                b = t.where(flat > a, flat, t.as_tensor(math.inf, device=flat.device)).min()
        else:
            part = self.xp.partition(flat, [skip + lo, skip + hi])
            a, b = part[skip + lo], part[skip + hi]
        return a + (b - a) * (pos - lo)

    def valid_extreme(self, x: Any, valid: Any, kind: str) -> Any:
        """min or max of x over valid places, where x is 0 elsewhere: the grid's extreme when it
        is not 0 (then a valid place holds it), else the masked one (one more pass)."""
        found = x.min() if kind == "min" else x.max()
        if float(found) != 0.0:
            return found
        fill = math.inf if kind == "min" else -math.inf
        masked = self.where(valid, x, fill)
        return masked.min() if kind == "min" else masked.max()

    def to_floats(self, values: dict[str, Any]) -> dict[str, float]:
        names = list(values)
        if not names:
            return {}
        if self.torch:
            t = self.xp
            stacked = t.stack(
                [
                    t.as_tensor(values[k], dtype=t.float32, device=self.device).reshape(())
                    for k in names
                ]
            )
            return dict(
                zip(names, (float(v) for v in stacked.double().cpu().tolist()), strict=True)
            )
        return {k: float(values[k]) for k in names}

    def to_lists(self, arrays: Sequence[Any]) -> list[list[float]]:
        if self.torch:
            t = self.xp
            stacked = t.stack([a.to(t.float64) for a in arrays]).cpu().tolist()
            return [[float(v) for v in row] for row in stacked]
        return [[float(v) for v in a] for a in arrays]


# -- layout -------------------------------------------------------------------------------


def _grid(
    ops: _Ops, arrays: dict[str, Any], mask: Any, seq_lens: Any
) -> tuple[dict[str, Any], Any]:
    """The inputs as [S, T] grids, one row per sequence, and the grid of valid tokens.

    Padded inputs are used as they come; packed ones (1-D with `seq_lens`) are laid out one
    sequence per row. Logprobs and entropy are set to 0 where a token is not valid, so that
    every per-token quantity that vanishes at d = 0 needs no mask: a sum over the grid is a sum
    over the valid tokens, and a NaN in a padded place goes nowhere.
    """
    xp = ops.xp
    adv = arrays.pop("A", None)
    if seq_lens is not None:
        lens = ops.as_int(seq_lens).reshape(-1)
        width = int(lens.max()) if int(lens.shape[0]) else 0
        cols = ops.arange(width).reshape(1, -1)
        valid = cols < lens.reshape(-1, 1)
        starts = xp.cumsum(lens, 0) - lens
        flat_len = int(arrays["lR"].reshape(-1).shape[0])
        pos = ops.clamp(starts.reshape(-1, 1) + cols, 0, max(flat_len - 1, 0))
        grids = {k: v.reshape(-1)[pos] for k, v in arrays.items()}
        if mask is not None:
            valid = valid & ops.as_bool(mask).reshape(-1)[pos]
        if adv is not None:
            adv = adv.reshape(-1, 1) if adv.shape[0] == lens.shape[0] else adv.reshape(-1)[pos]
    else:
        grids = {k: v.reshape(1, -1) if v.ndim == 1 else v for k, v in arrays.items()}
        shape = tuple(grids["lR"].shape)
        valid = ops.as_bool(xp.ones(shape) if mask is None else mask).reshape(shape)
        if adv is not None:
            per_sequence = adv.ndim == 1 and adv.shape[0] == shape[0]
            adv = adv.reshape(-1, 1) if per_sequence else adv.reshape(shape)
    grids = {k: ops.where(valid, v, 0.0) for k, v in grids.items()}
    if adv is not None:
        grids["A"] = adv
    return grids, valid


# -- the metrics --------------------------------------------------------------------------


def compute_step_metrics(
    rollout_logprobs: Any,
    trainer_logprobs: Any,
    mask: Any = None,
    *,
    new_logprobs: Any = None,
    advantages: Any = None,
    entropy: Any = None,
    seq_lens: Any = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    is_cap: float = 2.0,
    is_floor: float | None = None,
    seq_cap: float = 5.0,
    geo_low: float = 0.999,
    geo_high: float = 1.001,
    bucket_edges: Sequence[float] = DEFAULT_EDGES,
    trainer_buckets: bool = False,
) -> StepSummary:
    """Every mismatch metric the inputs allow, for one step (see the module docstring)."""
    kwargs = {
        "new_logprobs": new_logprobs,
        "advantages": advantages,
        "entropy": entropy,
        "seq_lens": seq_lens,
        "clip_low": clip_low,
        "clip_high": clip_high,
        "is_cap": is_cap,
        "is_floor": is_floor,
        "seq_cap": seq_cap,
        "geo_low": geo_low,
        "geo_high": geo_high,
        "bucket_edges": bucket_edges,
        "trainer_buckets": trainer_buckets,
    }
    try:
        import numpy
    except ImportError:  # torch-only host
        return _compute(rollout_logprobs, trainer_logprobs, mask, **kwargs)
    # 0/0 (a constant batch's correlation) and overflow are data here: NaN/Inf, not warnings.
    with numpy.errstate(all="ignore"):
        return _compute(rollout_logprobs, trainer_logprobs, mask, **kwargs)


def _compute(
    rollout_logprobs: Any,
    trainer_logprobs: Any,
    mask: Any,
    *,
    new_logprobs: Any,
    advantages: Any,
    entropy: Any,
    seq_lens: Any,
    clip_low: float,
    clip_high: float,
    is_cap: float,
    is_floor: float | None,
    seq_cap: float,
    geo_low: float,
    geo_high: float,
    bucket_edges: Sequence[float],
    trainer_buckets: bool,
) -> StepSummary:
    inputs = [rollout_logprobs, trainer_logprobs, new_logprobs, advantages, entropy, mask]
    first_torch = next((x for x in inputs if x is not None and _is_torch(x)), None)
    ops = _Ops(first_torch is not None, first_torch.device if first_torch is not None else None)
    xp = ops.xp

    arrays = {"lR": ops.f32(rollout_logprobs), "lT": ops.f32(trainer_logprobs)}
    if arrays["lR"].shape != arrays["lT"].shape:
        raise ValueError(
            f"rollout and trainer logprobs differ in shape: {tuple(arrays['lR'].shape)} vs "
            f"{tuple(arrays['lT'].shape)}"
        )
    if new_logprobs is not None:
        arrays["lN"] = ops.f32(new_logprobs)
    if entropy is not None:
        arrays["H"] = ops.f32(entropy)
    if advantages is not None:
        arrays["A"] = ops.f32(advantages)
    g, valid = _grid(ops, arrays, mask, seq_lens)

    n = int(valid.sum())
    if n == 0:
        return StepSummary({"tokens": 0.0, "sequences": 0.0}, [])
    vf = ops.float32(valid)
    counts = vf.sum(1)
    present = counts > 0  # sequences with at least one valid token
    n_seq = int(present.sum())

    # Per-token quantities, written so that each is 0 where d = 0 (that is, on padding).
    lr, lt = g["lR"], g["lT"]
    d = lt - lr
    dc = ops.clamp(d, -CLAMP, CLAMP)
    rm1 = xp.expm1(dc)  # ratio − 1
    k3 = rm1 - dc
    rk3 = xp.expm1(-dc) + dc
    abs_d = xp.abs(d)
    p_t, p_r = xp.exp(lt), xp.exp(lr)
    log_m = xp.log(0.5 * (p_t + p_r))
    dm_t = ops.clamp(log_m - lt, -CLAMP, CLAMP)
    dm_r = ops.clamp(log_m - lr, -CLAMP, CLAMP)
    js = 0.5 * (xp.expm1(dm_t) - dm_t) + 0.5 * (xp.expm1(dm_r) - dm_r)
    prob_diff = xp.abs(p_t - p_r)

    c_hi = is_cap
    c_lo = is_floor if is_floor is not None else 1.0 / is_cap

    def tok_mean(x: Any) -> Any:
        return x.sum() / n

    def per_seq(v: Any) -> Any:
        return v[present]

    def seq_mean_of_means(row_sums: Any) -> Any:
        return (per_seq(row_sums) / per_seq(counts)).mean()

    def rate(cond: Any) -> Any:
        return (cond & valid).sum() / n

    out: dict[str, Any] = {}
    # name → (per-token quantity, what to add back to its mean)
    per_token = {
        "k1_kl": (-d, 0.0),
        "k2_kl": (0.5 * d * d, 0.0),
        "k3_kl": (k3, 0.0),
        "reverse_k3_kl": (rk3, 0.0),
        "ratio_mean": (rm1, 1.0),
        "ratio_abs_dev": (xp.abs(rm1), 0.0),
        "abs_logp_diff_mean": (abs_d, 0.0),
        "mult_prob_error": (xp.expm1(xp.abs(dc)), 1.0),
        "prob_diff_mean": (prob_diff, 0.0),
        "js_div": (js, 0.0),
    }
    for name, (values, offset) in per_token.items():
        rows = values.sum(1)
        out[name] = rows.sum() / n + offset
        out[f"{name}_seq"] = seq_mean_of_means(rows) + offset
    out["ratio_dev_1e4"] = (out["ratio_mean"] - 1) * 1e4
    out["ratio_dev_1e4_seq"] = (out["ratio_mean_seq"] - 1) * 1e4
    out["k3_kl_max"] = ops.valid_extreme(k3, valid, "max")
    out["k3_kl_p99"] = ops.quantile_top(k3, n, 0.99)
    mean_rm1 = out["ratio_mean"] - 1
    out["ratio_std"] = tok_mean(((rm1 - mean_rm1) * vf) ** 2) ** 0.5
    out["ratio_min"] = ops.valid_extreme(rm1, valid, "min") + 1
    out["ratio_max"] = ops.valid_extreme(rm1, valid, "max") + 1
    out["abs_logp_diff_max"] = abs_d.max()
    mean_abs = out["abs_logp_diff_mean"]
    out["abs_logp_diff_std"] = tok_mean(((abs_d - mean_abs) * vf) ** 2) ** 0.5
    out["prob_diff_max"] = prob_diff.max()
    dp_t = (p_t - tok_mean(p_t * vf)) * vf
    dp_r = (p_r - tok_mean(p_r * vf)) * vf
    out["prob_pearson"] = tok_mean(dp_t * dp_r) / (
        (tok_mean(dp_t * dp_t) * tok_mean(dp_r * dp_r)) ** 0.5
    )
    out["chi2_token"] = tok_mean(rm1 * (rm1 + 2))  # E[r²] − 1

    # Sequence-level quantities, over the sequences with a valid token.
    s_d = per_seq(d.sum(1))
    s_dc = ops.clamp(s_d, -CLAMP, CLAMP)
    r_seq = xp.exp(s_dc)
    seq_counts = per_seq(counts)
    mean_lt = per_seq(lt.sum(1)) / seq_counts
    mean_lr = per_seq(lr.sum(1)) / seq_counts
    out["chi2_seq"] = xp.exp(2 * s_dc).mean() - 1
    out["ppl_trainer"] = xp.exp(ops.clamp(-mean_lt, None, 80.0)).mean()
    out["ppl_rollout"] = xp.exp(ops.clamp(-mean_lr, None, 80.0)).mean()
    log_ppl = mean_lr - mean_lt
    out["log_ppl_diff"] = log_ppl.mean()
    out["log_ppl_abs_diff"] = xp.abs(log_ppl).mean()
    out["ppl_ratio"] = xp.exp(ops.clamp(log_ppl, -CLAMP, CLAMP)).mean()
    out["rollout_clip_rate"] = rate((rm1 < -clip_low) | (rm1 > clip_high))

    # Importance-sampling correction diagnostics (r − 1 compared with the bounds − 1).
    out["tis_token_rate"] = rate(rm1 > c_hi - 1)
    out["mis_token_rate_low"] = rate(rm1 < c_lo - 1)
    out["mis_token_rate_high"] = out["tis_token_rate"]
    out["mis_token_rate"] = out["mis_token_rate_low"] + out["mis_token_rate_high"]
    out["tis_seq_rate"] = ops.float32(r_seq > seq_cap).mean()
    out["mis_seq_rate"] = ops.float32((r_seq < c_lo) | (r_seq > c_hi)).mean()
    r_geo = xp.exp(ops.clamp(s_d / seq_counts, -CLAMP, CLAMP))
    out["geo_mis_seq_rate"] = ops.float32((r_geo < geo_low) | (r_geo > geo_high)).mean()
    out["veto_token_rate"] = rate(rm1 < VETO_LOW - 1)
    vetoed = ((rm1 < VETO_LOW - 1) | (rm1 > VETO_HIGH - 1)) & valid
    out["veto_seq_rate"] = ops.float32(per_seq(vetoed.any(1))).mean()
    sum_r = n + rm1.sum()
    out["ess_token"] = sum_r**2 / (n * (n + (rm1 * (rm1 + 2)).sum()))
    rcm1 = ops.clamp(rm1, c_lo - 1, c_hi - 1) * vf
    sum_rc = n + rcm1.sum()
    out["ess_token_clamped"] = sum_rc**2 / (n * (n + (rcm1 * (rcm1 + 2)).sum()))
    out["ess_seq"] = r_seq.sum() ** 2 / (n_seq * (r_seq * r_seq).sum())
    out["seq_ratio_mean"] = r_seq.mean()
    out["seq_ratio_max"] = r_seq.max()
    out["seq_log_ratio_abs_max"] = xp.abs(s_d).max()
    finite = xp.isfinite(lr) & xp.isfinite(lt) & valid
    out["nonfinite_tokens"] = n - finite.sum()

    if "lN" in g:
        dn = ops.clamp(g["lN"] - lt, -CLAMP, CLAMP)
        rho_m1 = xp.expm1(dn)
        out["kl_new_old"] = tok_mean(rho_m1 - dn)
        clipped_low = (rho_m1 < -clip_low) & valid
        clipped_high = (rho_m1 > clip_high) & valid
        out["clip_rate"] = rate(clipped_low | clipped_high)
        if "A" in g:
            adv = g["A"]
            out["clip_rate_low"] = rate(clipped_low & (adv < 0))
            out["clip_rate_high"] = rate(clipped_high & (adv > 0))
    if "H" in g:
        out["entropy"] = tok_mean(g["H"])
        out["kl_entropy_ratio"] = out["k3_kl"] / out["entropy"]

    out["tokens"] = float(n)
    out["sequences"] = float(n_seq)
    metrics = ops.to_floats(out)

    oob = (rm1 < c_lo - 1) | (rm1 > c_hi - 1)
    sums = (d, abs_d, k3, rk3)
    buckets = [_bucket_table(ops, "rollout", p_r, valid, sums, oob, bucket_edges)]
    if trainer_buckets:
        buckets.append(_bucket_table(ops, "trainer", p_t, valid, sums, oob, bucket_edges))
    return StepSummary(metrics, buckets)


def _bucket_table(
    ops: _Ops,
    basis: str,
    prob: Any,
    valid: Any,
    sums: tuple[Any, Any, Any, Any],
    oob: Any,
    edges: Sequence[float],
) -> dict[str, Any]:
    """Token count and sums of d, |d|, k3, reverse k3 and out-of-bounds ratios per probability
    bucket. Tokens whose binned probability is not finite are left out."""
    xp = ops.xp
    k = len(edges) - 1
    keep = valid & xp.isfinite(prob)
    if not bool((keep == valid).all()):  # drop the few non-finite ones (one more pass each)
        sums = tuple(ops.where(keep, x, 0.0) for x in sums)
    if ops.torch:  # the number of inner edges at or below p; a few byte-wide compares
        idx = xp.zeros(prob.shape, dtype=xp.uint8, device=prob.device)
        for edge in edges[1:-1]:
            idx += prob >= edge
        idx = idx.to(xp.int64)
    else:
        idx = xp.searchsorted(ops.f32(list(edges[1:-1])), prob, side="right")
    weights = [ops.float32(keep), *sums, ops.float32(oob & keep)]
    columns = ops.to_lists(list(ops.bucket_sums(ops.clamp(idx, 0, k - 1), weights, k)))
    names = ("tokens", "sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3", "oob")
    return {
        "basis": basis,
        "edges": [float(e) for e in edges],
        **dict(zip(names, columns, strict=True)),
    }
