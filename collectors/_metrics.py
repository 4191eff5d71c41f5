"""The training-inference mismatch metrics of one step (../METRICS.md in the design docs).

`compute_step_metrics` is pure: tensors in, a `StepSummary` of plain floats out. It runs with
torch on the tensors' own device (CPU or CUDA) or with NumPy, in float32, and moves the scalars to
the host in one transfer at the end.

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
            return x.to(device=self.device) != 0
        import numpy as np

        if _is_torch(x):
            x = x.detach().cpu().numpy()
        return np.asarray(x) != 0

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

    def bincount(self, idx: Any, weights: Any, n: int) -> Any:
        if self.torch:
            out = self.xp.zeros(n, dtype=weights.dtype, device=weights.device)
            return out.index_add_(0, idx, weights)
        return self.xp.bincount(idx, weights=weights, minlength=n).astype(self.xp.float32)

    def bincount_many(self, idx: Any, weights: Sequence[Any], n: int) -> list[Any]:
        """Several weighted bincounts over one index, in one pass where the backend allows."""
        if self.torch:
            stacked = self.xp.stack(list(weights))
            out = self.xp.zeros((len(weights), n), dtype=stacked.dtype, device=stacked.device)
            return list(out.index_add_(1, idx, stacked))
        return [self.bincount(idx, w, n) for w in weights]

    def repeat(self, counts: Any) -> Any:
        if self.torch:
            return self.xp.repeat_interleave(self.arange(len(counts)), counts)
        return self.xp.repeat(self.arange(len(counts)), counts)

    def quantile(self, x: Any, q: float) -> Any:
        """The q-quantile with linear interpolation (NumPy's default), by selection not sort."""
        n = int(x.shape[0])
        pos = q * (n - 1)
        lo = math.floor(pos)
        hi = min(n - 1, lo + 1)
        if self.torch:
            a = self.xp.kthvalue(x, lo + 1).values
            b = self.xp.kthvalue(x, hi + 1).values
        else:
            part = self.xp.partition(x, [lo, hi])
            a, b = part[lo], part[hi]
        return a + (b - a) * (pos - lo)

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


# -- flattening ---------------------------------------------------------------------------


def _flatten(
    ops: _Ops, arrays: dict[str, Any], mask: Any, seq_lens: Any
) -> tuple[dict[str, Any], Any, int]:
    """Valid tokens as 1-D arrays plus each token's sequence index and the sequence count."""
    lr = arrays["lR"]
    if seq_lens is not None:
        lens = ops.as_int(seq_lens).reshape(-1)
        n_seq = int(lens.shape[0])
        seq = ops.repeat(lens)
        total = int(lens.sum())
        flat = {k: v.reshape(-1)[:total] for k, v in arrays.items()}
        if mask is not None:
            keep = ops.as_bool(mask).reshape(-1)[:total]
            flat = {k: v[keep] for k, v in flat.items()}
            seq = seq[keep]
        return flat, seq, n_seq
    if lr.ndim == 1:
        lr2 = {k: v.reshape(1, -1) if v.ndim == 1 else v for k, v in arrays.items()}
        arrays = lr2
        if mask is not None:
            mask = ops.as_bool(mask).reshape(1, -1)
    b, t = arrays["lR"].shape
    valid = ops.as_bool(mask) if mask is not None else None
    rows = ops.arange(b).reshape(-1, 1)
    rows = rows.expand(b, t) if ops.torch else ops.xp.broadcast_to(rows, (b, t))
    if valid is None:
        return {k: v.reshape(-1) for k, v in arrays.items()}, rows.reshape(-1), b
    return {k: v[valid] for k, v in arrays.items()}, rows[valid], b


def _per_token(ops: _Ops, x: Any, like: Any, seq_lens: Any) -> Any:
    """Advantages given per sequence ([B]) spread over that sequence's tokens."""
    x = ops.f32(x)
    if tuple(x.shape) == tuple(like.shape):
        return x
    if seq_lens is not None:
        lens = ops.as_int(seq_lens).reshape(-1)
        if x.ndim == 1 and x.shape[0] == lens.shape[0]:
            return x[ops.repeat(lens)]
        return x
    if x.ndim == 1 and like.ndim == 2 and x.shape[0] == like.shape[0]:
        return x.reshape(-1, 1) + like * 0
    return x


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
        arrays["A"] = _per_token(ops, advantages, arrays["lR"], seq_lens)
    flat, seq, n_rows = _flatten(ops, arrays, mask, seq_lens)

    lr, lt = flat["lR"], flat["lT"]
    n = int(lr.shape[0])
    if n == 0:
        return StepSummary({"tokens": 0.0, "sequences": 0.0}, [])

    # Sequences with at least one token, renumbered 0..S-1.
    counts_all = ops.bincount(seq, xp.ones_like(lr), n_rows)
    present = counts_all > 0
    n_seq = int(present.sum())
    if n_seq < n_rows:
        new_index = (
            xp.cumsum(present.to(xp.int64) if ops.torch else present.astype(xp.int64), 0) - 1
        )
        seq = new_index[seq]
        counts = counts_all[present]
    else:
        counts = counts_all

    d = lt - lr
    dc = ops.clamp(d, -CLAMP, CLAMP)
    r = xp.exp(dc)
    k3 = r - 1 - dc
    rk3 = xp.exp(-dc) - 1 + dc
    abs_d = xp.abs(d)
    p_t, p_r = xp.exp(lt), xp.exp(lr)
    log_m = xp.log(0.5 * (p_t + p_r))
    dm_t = ops.clamp(log_m - lt, -CLAMP, CLAMP)
    dm_r = ops.clamp(log_m - lr, -CLAMP, CLAMP)
    js = 0.5 * (xp.exp(dm_t) - 1 - dm_t) + 0.5 * (xp.exp(dm_r) - 1 - dm_r)
    prob_diff = xp.abs(p_t - p_r)
    mult = xp.exp(xp.abs(dc))

    c_hi = is_cap
    c_lo = is_floor if is_floor is not None else 1.0 / is_cap

    def tok_mean(x: Any) -> Any:
        return x.sum() / n

    def seq_sum(x: Any) -> Any:
        return ops.bincount(seq, x, n_seq)

    def seq_mean_of_means(x: Any) -> Any:
        return (seq_sum(x) / counts).mean()

    def rate(cond: Any) -> Any:
        return tok_mean(cond.to(xp.float32) if ops.torch else cond.astype(xp.float32))

    def frac(cond: Any) -> Any:
        return (cond.to(xp.float32) if ops.torch else cond.astype(xp.float32)).mean()

    out: dict[str, Any] = {}
    per_token = {
        "k1_kl": -d,
        "k2_kl": 0.5 * d * d,
        "k3_kl": k3,
        "reverse_k3_kl": rk3,
        "ratio_mean": r,
        "ratio_abs_dev": xp.abs(r - 1),
        "abs_logp_diff_mean": abs_d,
        "mult_prob_error": mult,
        "prob_diff_mean": prob_diff,
        "js_div": js,
    }
    for name, values in per_token.items():
        out[name] = tok_mean(values)
        out[f"{name}_seq"] = seq_mean_of_means(values)
    out["ratio_dev_1e4"] = (out["ratio_mean"] - 1) * 1e4
    out["ratio_dev_1e4_seq"] = (out["ratio_mean_seq"] - 1) * 1e4
    out["k3_kl_max"] = k3.max()
    out["k3_kl_p99"] = ops.quantile(k3, 0.99)
    mean_r = out["ratio_mean"]
    out["ratio_std"] = (tok_mean((r - mean_r) ** 2)) ** 0.5
    out["ratio_min"] = r.min()
    out["ratio_max"] = r.max()
    out["abs_logp_diff_max"] = abs_d.max()
    mean_abs = out["abs_logp_diff_mean"]
    out["abs_logp_diff_std"] = (tok_mean((abs_d - mean_abs) ** 2)) ** 0.5
    out["prob_diff_max"] = prob_diff.max()
    mp_t, mp_r = tok_mean(p_t), tok_mean(p_r)
    cov = tok_mean((p_t - mp_t) * (p_r - mp_r))
    out["prob_pearson"] = cov / ((tok_mean((p_t - mp_t) ** 2) * tok_mean((p_r - mp_r) ** 2)) ** 0.5)
    out["chi2_token"] = tok_mean(r * r) - 1

    # Sequence-level quantities.
    s_d = seq_sum(d)
    s_dc = ops.clamp(s_d, -CLAMP, CLAMP)
    r_seq = xp.exp(s_dc)
    mean_lt = seq_sum(lt) / counts
    mean_lr = seq_sum(lr) / counts
    out["chi2_seq"] = xp.exp(2 * s_dc).mean() - 1
    out["ppl_trainer"] = xp.exp(ops.clamp(-mean_lt, None, 80.0)).mean()
    out["ppl_rollout"] = xp.exp(ops.clamp(-mean_lr, None, 80.0)).mean()
    log_ppl = mean_lr - mean_lt
    out["log_ppl_diff"] = log_ppl.mean()
    out["log_ppl_abs_diff"] = xp.abs(log_ppl).mean()
    out["ppl_ratio"] = xp.exp(ops.clamp(log_ppl, -CLAMP, CLAMP)).mean()
    out["rollout_clip_rate"] = rate((r < 1 - clip_low) | (r > 1 + clip_high))

    # Importance-sampling correction diagnostics.
    out["tis_token_rate"] = rate(r > c_hi)
    out["mis_token_rate_low"] = rate(r < c_lo)
    out["mis_token_rate_high"] = rate(r > c_hi)
    out["mis_token_rate"] = out["mis_token_rate_low"] + out["mis_token_rate_high"]
    out["tis_seq_rate"] = frac(r_seq > seq_cap)
    out["mis_seq_rate"] = frac((r_seq < c_lo) | (r_seq > c_hi))
    r_geo = xp.exp(ops.clamp(s_d / counts, -CLAMP, CLAMP))
    out["geo_mis_seq_rate"] = frac((r_geo < geo_low) | (r_geo > geo_high))
    out["veto_token_rate"] = rate(r < VETO_LOW)
    vetoed = (r < VETO_LOW) | (r > VETO_HIGH)
    vetoed_f = vetoed.to(xp.float32) if ops.torch else vetoed.astype(xp.float32)
    out["veto_seq_rate"] = frac(seq_sum(vetoed_f) > 0)
    out["ess_token"] = r.sum() ** 2 / (n * (r * r).sum())
    rc = ops.clamp(r, c_lo, c_hi)
    out["ess_token_clamped"] = rc.sum() ** 2 / (n * (rc * rc).sum())
    out["ess_seq"] = r_seq.sum() ** 2 / (n_seq * (r_seq * r_seq).sum())
    out["seq_ratio_mean"] = r_seq.mean()
    out["seq_ratio_max"] = r_seq.max()
    out["seq_log_ratio_abs_max"] = xp.abs(s_d).max()
    finite = xp.isfinite(lr) & xp.isfinite(lt)
    out["nonfinite_tokens"] = n - (finite.sum())

    if "lN" in flat:
        dn = ops.clamp(flat["lN"] - lt, -CLAMP, CLAMP)
        rho = xp.exp(dn)
        out["kl_new_old"] = tok_mean(rho - 1 - dn)
        clipped_low = rho < 1 - clip_low
        clipped_high = rho > 1 + clip_high
        out["clip_rate"] = rate(clipped_low | clipped_high)
        if "A" in flat:
            adv = flat["A"]
            out["clip_rate_low"] = rate(clipped_low & (adv < 0))
            out["clip_rate_high"] = rate(clipped_high & (adv > 0))
    if "H" in flat:
        out["entropy"] = tok_mean(flat["H"])
        out["kl_entropy_ratio"] = out["k3_kl"] / out["entropy"]

    out["tokens"] = float(n)
    out["sequences"] = float(n_seq)
    metrics = ops.to_floats(out)

    buckets = [_bucket_table(ops, "rollout", p_r, d, k3, rk3, r, c_lo, c_hi, bucket_edges)]
    if trainer_buckets:
        buckets.append(_bucket_table(ops, "trainer", p_t, d, k3, rk3, r, c_lo, c_hi, bucket_edges))
    return StepSummary(metrics, buckets)


def _bucket_table(
    ops: _Ops,
    basis: str,
    prob: Any,
    d: Any,
    k3: Any,
    rk3: Any,
    r: Any,
    c_lo: float,
    c_hi: float,
    edges: Sequence[float],
) -> dict[str, Any]:
    xp = ops.xp
    k = len(edges) - 1
    keep = xp.isfinite(prob)
    prob, d, k3, rk3, r = prob[keep], d[keep], k3[keep], rk3[keep], r[keep]
    inner = ops.f32(list(edges[1:-1]))
    if ops.torch:
        idx = xp.bucketize(prob, inner, right=True)
    else:
        idx = xp.searchsorted(inner, prob, side="right")
    idx = ops.clamp(idx, 0, k - 1)
    oob = (r < c_lo) | (r > c_hi)
    one = xp.ones_like(prob)
    columns = ops.to_lists(
        ops.bincount_many(
            idx,
            [
                one,
                d,
                xp.abs(d),
                k3,
                rk3,
                oob.to(xp.float32) if ops.torch else oob.astype(xp.float32),
            ],
            k,
        )
    )
    names = ("tokens", "sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3", "oob")
    return {
        "basis": basis,
        "edges": [float(e) for e in edges],
        **dict(zip(names, columns, strict=True)),
    }
