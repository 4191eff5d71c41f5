"""The training-inference mismatch metrics of one step (../METRICS.md in the design docs).

`compute_step_metrics` is pure: tensors in, a `StepSummary` of plain floats out. It runs with
torch on the tensors' own device (CPU or CUDA) or with NumPy, in float32, on the padded
[sequences, tokens] grid (row sums, no scatters). Besides the token and sequence counts, a few
single values cross to the host to pick a cheaper path (a tie at the p99 rank, a masked extreme,
non-finite probabilities); the metrics themselves move in one transfer at the end. Plain lists
go to NumPy, to torch where NumPy is not installed, and to the headline metrics of `_pure` where
neither is. The names, their forms and the constants below are collectors._vocabulary's.

Choices where the frameworks differ, made once here:
- d = lT − lR (trainer over rollout). Metrics that exponentiate d use d clamped to ±20 (verl,
  slime, SkyRL); the others (k1, k2, |d| statistics, sums of d) use d as given, so a |d| of 50 is
  reported as 50.
- Headline scalars come as a token mean (bare name; verl, TRL) and as a mean over sequences of
  each sequence's token mean (`_seq`; slime, PipelineRL). Sequences with no valid token are left
  out of sequence means and of `sequences`.
- ratio_std is the population standard deviation over tokens.
- kl_new_old is k3 between the new policy and the old one: d_new = lN − lT (k3_kl: lT − lR).
- js_div uses k3(a‖M) = exp(log M − a) − 1 − (log M − a), averaged over both sides.
- NaN or ±Inf in an input is not dropped: it propagates into every metric it touches (a collapse
  shows up as NaN, which the server stores and alarms on), and `nonfinite_tokens` counts such
  tokens. Bucket tables leave out tokens whose binned probability is not finite.
- Float32 throughout: a value beyond its range is ±inf (a perplexity too), never capped.
- A step with no valid token yields only `tokens` = 0 and `sequences` = 0: nothing else is
  defined, so nothing else is reported.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from collectors import _pure
from collectors._exemplars import attach_token_ids, check_k, select
from collectors._ops import Ops, grid, is_torch
from collectors._vocabulary import (
    BUCKET_COLUMNS,
    CLAMP,
    DEFAULT_EDGES,
    EMPTY_STEP,
    PER_TOKEN,
    VETO_HIGH,
    VETO_LOW,
    seq_form,
)


@dataclass(frozen=True)
class StepSummary:
    """Per-step scalars (`metrics`), probability-bucket tables and, when asked for, token
    exemplars (see collectors._exemplars), all in the wire shape."""

    metrics: dict[str, float]
    buckets: list[dict[str, Any]] = field(default_factory=list)
    exemplars: list[dict[str, Any]] = field(default_factory=list)


def merge_buckets(tables: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add bucket tables of the same basis and edges (from several actors or steps)."""
    merged: dict[tuple[str, tuple[float, ...]], dict[str, Any]] = {}
    for table in tables:
        key = (table["basis"], tuple(table["edges"]))
        if key not in merged:
            merged[key] = {
                "basis": key[0],
                "edges": list(key[1]),
                **{s: list(table[s]) for s in BUCKET_COLUMNS},
            }
            continue
        into = merged[key]
        for s in BUCKET_COLUMNS:
            into[s] = [a + b for a, b in zip(into[s], table[s], strict=True)]
    return list(merged.values())


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
    exemplars: int = 0,
    token_ids: Any = None,
) -> StepSummary:
    """Every mismatch metric the inputs allow, for one step (see the module docstring).

    `exemplars=K` (at most 512) also keeps the K tokens with the largest |d| and a uniform
    sample of K tokens, with their `token_id` when `token_ids` (laid out like the logprobs) is
    given: one top-K selection, no sort."""
    k = check_k(exemplars)
    bounds = _Bounds(
        clip_low,
        clip_high,
        is_cap,
        is_floor if is_floor is not None else 1.0 / is_cap,
        seq_cap,
        geo_low,
        geo_high,
    )
    kwargs = {
        "new_logprobs": new_logprobs,
        "advantages": advantages,
        "entropy": entropy,
        "seq_lens": seq_lens,
        "bounds": bounds,
        "bucket_edges": bucket_edges,
        "trainer_buckets": trainer_buckets,
        "exemplars": k,
    }
    try:
        import numpy
    except ImportError:  # torch-only host, or neither (mismatch-collectors needs none)
        if importlib.util.find_spec("torch") is None:
            return _pure_python(rollout_logprobs, trainer_logprobs, mask, kwargs)
        summary = _compute(rollout_logprobs, trainer_logprobs, mask, **kwargs)
    else:
        # 0/0 (a constant batch's correlation) and overflow are data here: NaN/Inf, not warnings.
        with numpy.errstate(all="ignore"):
            summary = _compute(rollout_logprobs, trainer_logprobs, mask, **kwargs)
    attach_token_ids(summary.exemplars, token_ids, seq_lens)
    return summary


def _pure_python(rollout: Any, trainer: Any, mask: Any, kwargs: dict[str, Any]) -> StepSummary:
    """The headline metrics without NumPy or torch (`_pure`); inputs only they can use are
    refused, so that a caller is told rather than given a partial answer silently."""
    given = [
        k for k in ("new_logprobs", "advantages", "entropy", "seq_lens") if kwargs[k] is not None
    ]
    if kwargs["trainer_buckets"]:
        given.append("trainer_buckets")
    if kwargs["exemplars"]:
        given.append("exemplars")
    if given:
        raise ValueError(f"{', '.join(given)} needs numpy or torch")
    return StepSummary(_pure.compute(rollout, trainer, mask), [])


@dataclass(frozen=True)
class _Bounds:
    clip_low: float
    clip_high: float
    is_cap: float
    is_floor: float
    seq_cap: float
    geo_low: float
    geo_high: float


class _Step:
    """One step's inputs on the grid and the per-token quantities every metric group shares.

    Each per-token quantity is written to be 0 where d = 0, that is on padding, so a sum over
    the grid is a sum over the valid tokens."""

    def __init__(self, ops: Ops, g: dict[str, Any], valid: Any, n: int) -> None:
        xp = ops.xp
        self.ops, self.xp, self.g, self.valid, self.n = ops, xp, g, valid, n
        self.vf = ops.float32(valid)
        self.counts = self.vf.sum(1)
        self.present = self.counts > 0  # sequences with at least one valid token
        self.n_seq = int(self.present.sum())
        self.lr, self.lt = g["lR"], g["lT"]
        self.d = self.lt - self.lr
        self.dc = ops.clamp(self.d, -CLAMP, CLAMP)
        self.rm1 = xp.expm1(self.dc)  # ratio − 1
        self.k3 = self.rm1 - self.dc
        self.rk3 = xp.expm1(-self.dc) + self.dc
        self.abs_d = xp.abs(self.d)
        self.p_t, self.p_r = xp.exp(self.lt), xp.exp(self.lr)

    def tok_mean(self, x: Any) -> Any:
        return x.sum() / self.n

    def per_seq(self, v: Any) -> Any:
        return v[self.present]

    def rate(self, cond: Any) -> Any:
        return (cond & self.valid).sum() / self.n


def _compute(
    rollout_logprobs: Any,
    trainer_logprobs: Any,
    mask: Any,
    *,
    new_logprobs: Any,
    advantages: Any,
    entropy: Any,
    seq_lens: Any,
    bounds: _Bounds,
    bucket_edges: Sequence[float],
    trainer_buckets: bool,
    exemplars: int,
) -> StepSummary:
    inputs = [rollout_logprobs, trainer_logprobs, new_logprobs, advantages, entropy, mask]
    first_torch = next((x for x in inputs if x is not None and is_torch(x)), None)
    use_torch = first_torch is not None or "numpy" not in sys.modules  # see compute_step_metrics
    ops = Ops(use_torch, first_torch.device if first_torch is not None else None)
    arrays = {"lR": ops.f32(rollout_logprobs), "lT": ops.f32(trainer_logprobs)}
    if arrays["lR"].shape != arrays["lT"].shape:
        raise ValueError(
            f"rollout and trainer logprobs differ in shape: {tuple(arrays['lR'].shape)} vs "
            f"{tuple(arrays['lT'].shape)}"
        )
    for key, value in (("lN", new_logprobs), ("H", entropy), ("A", advantages)):
        if value is not None:
            arrays[key] = ops.f32(value)
    g, valid = grid(ops, arrays, mask, seq_lens)
    n = int(valid.sum())
    if n == 0:
        return StepSummary(dict.fromkeys(EMPTY_STEP, 0.0), [])
    step = _Step(ops, g, valid, n)
    out: dict[str, Any] = {}
    _token_metrics(step, out, bounds)
    _sequence_metrics(step, out)
    _correction_metrics(step, out, bounds)
    _update_metrics(step, out, bounds)
    out["tokens"] = float(n)
    out["sequences"] = float(step.n_seq)
    metrics = ops.to_floats(out)

    rm1 = step.rm1
    oob = (rm1 < bounds.is_floor - 1) | (rm1 > bounds.is_cap - 1)
    sums = (step.d, step.abs_d, step.k3, step.rk3)
    buckets = [_bucket_table(ops, "rollout", step.p_r, valid, sums, oob, bucket_edges)]
    if trainer_buckets:
        buckets.append(_bucket_table(ops, "trainer", step.p_t, valid, sums, oob, bucket_edges))
    chosen = select(ops, step.abs_d, valid, step.lr, step.lt, n, exemplars)
    return StepSummary(metrics, buckets, chosen)


def _token_metrics(s: _Step, out: dict[str, Any], bounds: _Bounds) -> None:
    """Token-mean and sequence-mean headline scalars, and statistics over tokens."""
    xp, ops, d, dc, rm1 = s.xp, s.ops, s.d, s.dc, s.rm1
    log_m = xp.log(0.5 * (s.p_t + s.p_r))
    dm_t = ops.clamp(log_m - s.lt, -CLAMP, CLAMP)
    dm_r = ops.clamp(log_m - s.lr, -CLAMP, CLAMP)
    js = 0.5 * (xp.expm1(dm_t) - dm_t) + 0.5 * (xp.expm1(dm_r) - dm_r)
    prob_diff = xp.abs(s.p_t - s.p_r)
    # name → (per-token quantity, what to add back to its mean)
    per_token = {
        "k1_kl": (-d, 0.0),
        "k2_kl": (0.5 * d * d, 0.0),
        "k3_kl": (s.k3, 0.0),
        "reverse_k3_kl": (s.rk3, 0.0),
        "ratio_mean": (rm1, 1.0),
        "ratio_abs_dev": (xp.abs(rm1), 0.0),
        "abs_logp_diff_mean": (s.abs_d, 0.0),
        "mult_prob_error": (xp.expm1(xp.abs(dc)), 1.0),
        "prob_diff_mean": (prob_diff, 0.0),
        "js_div": (js, 0.0),
    }
    for name in PER_TOKEN:
        values, offset = per_token[name]
        rows = values.sum(1)
        out[name] = rows.sum() / s.n + offset
        out[seq_form(name)] = (s.per_seq(rows) / s.per_seq(s.counts)).mean() + offset
    out["ratio_dev_1e4"] = (out["ratio_mean"] - 1) * 1e4
    out[seq_form("ratio_dev_1e4")] = (out[seq_form("ratio_mean")] - 1) * 1e4
    out["k3_kl_max"] = ops.valid_extreme(s.k3, s.valid, "max")
    # a NaN token has no rank: the percentile of a step with one is NaN, like its max
    p99 = ops.quantile_top(s.k3, s.n, 0.99)
    out["k3_kl_p99"] = xp.where(xp.isnan(out["k3_kl_max"]), out["k3_kl_max"], p99)
    out["ratio_std"] = s.tok_mean(((rm1 - (out["ratio_mean"] - 1)) * s.vf) ** 2) ** 0.5
    out["ratio_min"] = xp.exp(ops.valid_extreme(s.dc, s.valid, "min"))  # small r keeps its digits
    out["ratio_max"] = xp.exp(ops.valid_extreme(s.dc, s.valid, "max"))
    out["abs_logp_diff_max"] = s.abs_d.max()
    mean_abs = out["abs_logp_diff_mean"]
    out["abs_logp_diff_std"] = s.tok_mean(((s.abs_d - mean_abs) * s.vf) ** 2) ** 0.5
    out["prob_diff_max"] = prob_diff.max()
    out["prob_pearson"] = _pearson(s)
    out["chi2_token"] = s.tok_mean(rm1 * (rm1 + 2))  # E[r²] − 1
    out["rollout_clip_rate"] = s.rate((rm1 < -bounds.clip_low) | (rm1 > bounds.clip_high))
    finite = xp.isfinite(s.lr) & xp.isfinite(s.lt) & s.valid
    out["nonfinite_tokens"] = s.n - finite.sum()


def _pearson(s: _Step) -> Any:
    """Pearson(pT, pR) on p / max p (the same correlation) and with two square roots, not one
    of a product: a step of improbable tokens would underflow float32 to 0/0 otherwise."""
    q_t, q_r = s.p_t * s.vf, s.p_r * s.vf
    q_t, q_r = q_t / q_t.max(), q_r / q_r.max()
    dq_t = (q_t - s.tok_mean(q_t)) * s.vf
    dq_r = (q_r - s.tok_mean(q_r)) * s.vf
    return s.tok_mean(dq_t * dq_r) / (
        s.tok_mean(dq_t * dq_t) ** 0.5 * s.tok_mean(dq_r * dq_r) ** 0.5
    )


def _sequence_metrics(s: _Step, out: dict[str, Any]) -> None:
    """Perplexities and sequence-level ratios, over the sequences with a valid token."""
    xp, ops = s.xp, s.ops
    s_dc = ops.clamp(s.per_seq(s.d.sum(1)), -CLAMP, CLAMP)
    seq_counts = s.per_seq(s.counts)
    mean_lt = s.per_seq(s.lt.sum(1)) / seq_counts
    mean_lr = s.per_seq(s.lr.sum(1)) / seq_counts
    out["chi2_seq"] = xp.exp(2 * s_dc).mean() - 1
    out["ppl_trainer"] = xp.exp(-mean_lt).mean()
    out["ppl_rollout"] = xp.exp(-mean_lr).mean()
    log_ppl = mean_lr - mean_lt
    out["log_ppl_diff"] = log_ppl.mean()
    out["log_ppl_abs_diff"] = xp.abs(log_ppl).mean()
    out["ppl_ratio"] = xp.exp(ops.clamp(log_ppl, -CLAMP, CLAMP)).mean()


def _correction_metrics(s: _Step, out: dict[str, Any], b: _Bounds) -> None:
    """Importance-sampling correction diagnostics (r − 1 compared with the bounds − 1)."""
    xp, ops, rm1, n = s.xp, s.ops, s.rm1, s.n
    s_d = s.per_seq(s.d.sum(1))
    r_seq = xp.exp(ops.clamp(s_d, -CLAMP, CLAMP))
    out["tis_token_rate"] = s.rate(rm1 > b.is_cap - 1)
    out["mis_token_rate_low"] = s.rate(rm1 < b.is_floor - 1)
    out["mis_token_rate_high"] = out["tis_token_rate"]
    out["mis_token_rate"] = out["mis_token_rate_low"] + out["mis_token_rate_high"]
    out["tis_seq_rate"] = ops.float32(r_seq > b.seq_cap).mean()
    out["mis_seq_rate"] = ops.float32((r_seq < b.is_floor) | (r_seq > b.is_cap)).mean()
    r_geo = xp.exp(ops.clamp(s_d / s.per_seq(s.counts), -CLAMP, CLAMP))
    out["geo_mis_seq_rate"] = ops.float32((r_geo < b.geo_low) | (r_geo > b.geo_high)).mean()
    out["veto_token_rate"] = s.rate(rm1 < VETO_LOW - 1)
    vetoed = ((rm1 < VETO_LOW - 1) | (rm1 > VETO_HIGH - 1)) & s.valid
    out["veto_seq_rate"] = ops.float32(s.per_seq(vetoed.any(1))).mean()
    r = xp.exp(s.dc) * s.vf  # not 1 + (r − 1): Σr² of small ratios would cancel to nothing
    out["ess_token"] = r.sum() ** 2 / (n * (r * r).sum())
    rcm1 = ops.clamp(rm1, b.is_floor - 1, b.is_cap - 1) * s.vf
    sum_rc = n + rcm1.sum()
    out["ess_token_clamped"] = sum_rc**2 / (n * (n + (rcm1 * (rcm1 + 2)).sum()))
    out["ess_seq"] = r_seq.sum() ** 2 / (s.n_seq * (r_seq * r_seq).sum())
    out["seq_ratio_mean"] = r_seq.mean()
    out["seq_ratio_max"] = r_seq.max()
    out["seq_log_ratio_abs_max"] = xp.abs(s_d).max()


def _update_metrics(s: _Step, out: dict[str, Any], b: _Bounds) -> None:
    """What the policy update itself does (given the new logprobs, advantages, entropy)."""
    g = s.g
    if "lN" in g:
        dn = s.ops.clamp(g["lN"] - s.lt, -CLAMP, CLAMP)
        rho_m1 = s.xp.expm1(dn)
        out["kl_new_old"] = s.tok_mean(rho_m1 - dn)
        clipped_low = (rho_m1 < -b.clip_low) & s.valid
        clipped_high = (rho_m1 > b.clip_high) & s.valid
        out["clip_rate"] = s.rate(clipped_low | clipped_high)
        if "A" in g:
            out["clip_rate_low"] = s.rate(clipped_low & (g["A"] < 0))
            out["clip_rate_high"] = s.rate(clipped_high & (g["A"] > 0))
    if "H" in g:
        out["entropy"] = s.tok_mean(g["H"])
        out["kl_entropy_ratio"] = out["k3_kl"] / out["entropy"]


def _bucket_table(
    ops: Ops,
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
    return {
        "basis": basis,
        "edges": [float(e) for e in edges],
        **dict(zip(BUCKET_COLUMNS, columns, strict=True)),
    }
