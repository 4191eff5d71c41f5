"""The named checks behind a mismatch attribution: each reads one fingerprint a failure mode
leaves in a run's own metrics and returns its figure, a verdict and a sentence.

Each engine failure leaves its own fingerprint (`server.analysis.attribution` ranks them):

- `mean_offset`: median |k3 − k1| / median k3 (or the median ratio drift ×1e4); passes at
  `OFFSET_SHARE` or more with one sign on `SIGN_SHARE` of steps — raw logprobs, a sampler-only
  setting.
- `update_jump`, `update_onset` (in `server.analysis.attribution_updates`): the signal at and
  after weight updates — state outliving a weight update.
- `bucket_slope`: decades of per-token k3 gained per decade p falls; passes at `SLOPE_STEEP` — a
  low-precision lm_head.
- `lag_tracking`: Spearman ρ of the signal against lag; passes at `LAG_RHO` with lag above 0 on
  some steps — off-policy lag.
- `gpu_contrast`: this GPU type's median over another's, like for like; passes when the interval
  lies above 1 — GPU kernels.
- `level`: the signal's median on its family's scale; passes within the healthy bound, or within
  `REFERENCE_FACTOR` of the project's reference run where it sits lower — normal noise.
- `precision_size`: the k3 median; passes between `ROUNDING_FLOOR` and `HEALTHY_K3`, the size
  that rounding the logits to bf16 leaves — a low-precision lm_head.
- `token_concentration`: the median over steps of k3_kl_p99 / k3_kl; passes at `CONCENTRATED`
  — a few tokens carry the mismatch, as a sampler-only penalty leaves it.

A check whose inputs the run does not log returns `passed=None` ("not run") with what it needs.
Everything here is pure: series are `{step: value}` mappings, NaN and ±Inf values are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from server.domain import signals

Series = Mapping[int, float]

MIN_STEPS = 5
"""Fewer steps than this leave sign shares and correlations to chance (5 steps of one sign
happen by chance 1 time in 16)."""
SIGN_SHARE = 0.9
"""A zero-mean noise puts each step's sign at a coin toss: 90% of ≥ 10 steps on one side happens
by chance about 2% of the time."""
OFFSET_SHARE = 0.5
"""k1 and k3 estimate the same KL(rollout ‖ trainer) when both sides are normalised distributions
over the tokens sampled, so k3 − k1 is zero up to k1's sampling noise (about √(2·k3/N) over N
tokens: under 5% of k3 at k3 = 1e-3 and 1e4 tokens). Raw logprobs leave k1 ≈ −2·k3 (the demo's
real vLLM runs, `server.domain.signals`), a share of 3; half of k3 leaves room for noise."""
RATIO_DRIFT = 50.0
"""The ratio-drift rule's threshold (×1e-4, `server.alarms.configuring.defaults.RATIO_WHY`): a
healthy token mean of r stays within a few ×1e-4 of 1."""
SLOPE_STEEP = 0.5
"""Decades of per-token k3 gained per decade of p lost. The write-ups' scatter plots show the
gap growing as p → 0 on every engine, so a rise alone names no cause; half a decade per decade
(k3 per token ×10 from p ≈ 0.5 down to p ≈ 0.005) is where the low-probability tail carries most
of the mismatch, which a low-precision lm_head does."""
MIN_BUCKET_TOKENS = 20.0
"""A bucket with fewer tokens says nothing about its mean k3."""
LAG_RHO = 0.6
"""Spearman ρ ≥ 0.6 over ≥ 10 steps has a chance probability under 5% without a link."""
HEALTHY_K3, HEALTHY_K3_MOE = 1e-3, 1e-1
"""The highest k3 the field calls healthy on dense bf16 runs, and on runs whose config records
an MoE model (`server.domain.moe`): METRICS.md, LMSYS 1e-5 … 1e-3 and 1e-3 … 1e-1."""
HEALTHY_RATIO = RATIO_DRIFT
REFERENCE_FACTOR = 10.0
"""A run within ×10 of its project's reference run (the project's healthy baseline, `mismatch
project reference`) is as healthy as that run: medians of runs with the same setup wander by
less (the real vLLM engine's healthy runs at four temperature and top-p/top-k settings sit within
×1.9 of their reference, `benchmarks/attribution_engine.py`, tuning seeds 1 and 2)."""
ROUNDING_FLOOR = 1e-9
"""Rounding a logit z to a format with m mantissa bits moves it by up to |z|·2^-(m+1), and k3 ≈
d²/2 for a logprob gap d: for logits of a few to a few tens, fp32 (m = 23) leaves k3 ≈ 1e-14 …
1e-12 and bf16 (m = 7) ≈ 1e-6 … 1e-3. Measured on the real vLLM engine (tuning seeds 1 and 2):
fp32 on both sides 1.2–3.3e-13, a bf16 lm_head 2.6e-5 … 1.1e-4. 1e-9 sits four decades from
each."""
CONCENTRATED = 12.0
"""The 99th-percentile token's k3 over the step's mean k3. Where the logprob gap d of a token is
Gaussian-like (rounding, a policy that moved, stale prompt state), k3 ≈ d²/2 is a chi-square
with one degree of freedom, whose 99th percentile is 6.6× its mean; a gap shared by every token
(raw logprobs, top-p/top-k renormalisation) sits lower. A sampler-only penalty moves only the
tokens it penalises. Measured on the real vLLM engine (tuning seeds 1 and 2): every mode but
the penalties 1.1–8.9, repetition and presence penalties 14–33. A policy sure of most tokens
concentrates even fp32 noise (the demo's parity run: 13 at k3 ≈ 1e-13), so attribution reads
it only above the healthy level."""


@dataclass(frozen=True, slots=True)
class Check:
    """One check's outcome: `passed` None when the run lacks what it needs (`sentence` says)."""

    name: str
    figure: float | None
    threshold: float
    passed: bool | None
    sentence: str


@dataclass(frozen=True, slots=True)
class Bucket:
    """A token-probability bucket's sums over the steps read (METRICS.md, low-probability
    buckets): `lo`–`hi` bound p = exp(rollout logprob)."""

    lo: float
    hi: float
    tokens: float
    sum_k3: float


@dataclass(frozen=True, slots=True)
class Reference:
    """The project's reference run (its healthy baseline) and its median of the same signal,
    on the signal's family scale."""

    run_id: str
    level: float


@dataclass(frozen=True, slots=True)
class GpuContrast:
    """This run's GPU type against another in a like-for-like group (only the GPU differs):
    the ratio of medians and its bootstrap interval."""

    gpu: str
    other: str
    ratio: float
    ci_low: float
    ci_high: float


def finite(series: Series) -> dict[int, float]:
    return {s: float(v) for s, v in series.items() if math.isfinite(v)}


def fmt(x: float) -> str:
    return f"{x:.3g}"


def not_run(name: str, threshold: float, needs: str) -> Check:
    return Check(name, None, threshold, None, f"not run: needs {needs}")


def sign_share(values: Sequence[float]) -> float:
    """Share of the values on the side most of them sit (0 counts on neither side)."""
    if not values:
        return 0.0
    pos = sum(v > 0 for v in values)
    neg = sum(v < 0 for v in values)
    return max(pos, neg) / len(values)


def mean_offset(
    k3: Series, k1: Series, ratio: Series, ratio_signal: signals.Signal | None = None
) -> Check:
    """A steady offset of mean d = lT − lR that the KL does not explain. With k1 and k3 logged:
    per step e = k3 − k1 (= mean d + KL, zero up to noise when both sides are normalised), figure
    median |e| / median k3. With only a ratio-drift series: its median (×1e4). Either way the
    offset must keep one sign on `SIGN_SHARE` of steps. `ratio_signal`, the member `ratio` was
    converted from, puts the sentence in its own units (TRL's mean ratio as a ratio)."""
    name = "mean_offset"
    k3f, k1f = finite(k3), finite(k1)
    common = sorted(set(k3f) & set(k1f))
    if len(common) >= MIN_STEPS:
        excess = [k3f[s] - k1f[s] for s in common]
        level = max(float(np.median([k3f[s] for s in common])), 1e-12)
        share = float(np.median(np.abs(excess))) / level
        signs = sign_share(excess)
        passed = share >= OFFSET_SHARE and signs >= SIGN_SHARE
        side = "above" if np.median(excess) > 0 else "below"  # e > 0: mean d above −KL
        sentence = (
            f"k1 − k3 keeps one sign on {signs:.0%} of {len(common)} steps and is "
            f"{fmt(share)}× k3: the trainer's logprobs sit steadily {side} the rollout's"
            if passed
            else f"k1 ≈ k3 within {fmt(share)}× k3 (one sign on {signs:.0%} of steps): "
            "no offset beyond the KL itself"
        )
        return Check(name, share, OFFSET_SHARE, passed, sentence)
    drift = finite(ratio)
    if len(drift) < MIN_STEPS:
        return not_run(
            name, OFFSET_SHARE, f"k1_kl and k3_kl, or a ratio drift, on {MIN_STEPS}+ steps"
        )
    values = list(drift.values())
    median = float(np.median(values))
    signs = sign_share(values)
    passed = abs(median) >= RATIO_DRIFT and signs >= SIGN_SHARE
    sentence = (
        f"{_drift_words(median, ratio_signal)} {_one_side(ratio_signal)} on {signs:.0%} of "
        f"{len(values)} steps"
        + (
            ": a systematic offset"
            if passed
            else f", within {_drift_words(RATIO_DRIFT, ratio_signal, bound=True)} or unsteady"
        )
    )
    return Check(name, median, RATIO_DRIFT, passed, sentence)


def _drift_words(scaled: float, signal: signals.Signal | None, *, bound: bool = False) -> str:
    """A ratio drift (×1e4 scale) in the units of the signal it came from: "the importance
    ratio drifts by 12 ×1e-4" for ratio_dev_1e4, "the mean importance ratio (ratio_mean@trl)
    is 0.03" for a ratio mean; as a bound, "±50" or "1 ± 0.7"."""
    if signal is None or signal.conversion == "same":
        return f"±{scaled:g}" if bound else f"the importance ratio drifts by {fmt(scaled)} ×1e-4"
    if bound:  # a capped mean's bound sits further below 1 than above
        up, down = (abs((signal.from_scale(scaled, near) or 1.0) - 1.0) for near in (2.0, 0.0))
        return f"1 ± {fmt(up)}" if math.isclose(up, down) else f"1 + {fmt(up)} / 1 − {fmt(down)}"
    own = signal.from_scale(scaled, 0.0 if scaled < 0 else 2.0)
    return f"the mean importance ratio ({signal.metric}) is {fmt(own or math.nan)}"


def _one_side(signal: signals.Signal | None) -> str:
    """How a steady drift is said: a ×1e4 drift keeps one sign, a ratio one side of 1."""
    return "with one sign" if signal is None or signal.conversion == "same" else "on one side of 1"


def own_level(value: float, signal: signals.Signal | None, scale_unit: str, near: float) -> str:
    """A level on a family's scale in the words of the signal it came from: "k3 0.002" for a
    member read as it is, "k1_kl -0.09 (0.09 on the k3 scale)" for a converted one (`near`, a
    value of the signal, picks the side of 0 or 1 that the conversion folds)."""
    if signal is None or signal.conversion == "same":
        return f"{scale_unit} {fmt(value)}"
    own = signal.from_scale(value, near)
    return f"{signal.metric} {fmt(own or math.nan)} ({fmt(value)} on the {scale_unit} scale)"


def token_concentration(k3: Series, p99: Series) -> Check:
    """How far the step's 99th-percentile token sits above its mean k3 (median over steps):
    a penalty the sampler applies and the trainer does not changes the tokens it penalises
    (repeated, present ones) and leaves the rest, so a few tokens carry the mismatch."""
    name = "token_concentration"
    k3f, p99f = finite(k3), finite(p99)
    common = [s for s in sorted(set(k3f) & set(p99f)) if k3f[s] > 0]
    if len(common) < MIN_STEPS:
        return not_run(name, CONCENTRATED, f"k3_kl_p99 beside k3_kl on {MIN_STEPS}+ steps")
    ratio = float(np.median([p99f[s] / k3f[s] for s in common]))
    passed = ratio >= CONCENTRATED
    sentence = f"per step the 99th-percentile token's k3 is {fmt(ratio)}× the mean" + (
        ": a few tokens carry the mismatch, as a sampler-only penalty leaves it"
        if passed
        else ": the gap is spread over the tokens"
    )
    return Check(name, ratio, CONCENTRATED, passed, sentence)


def _representative_p(lo: float, hi: float) -> float:
    """Geometric middle of a bucket; the bucket from 0 counts a decade below its upper edge."""
    return math.sqrt(lo * hi) if lo > 0 else hi / 10.0


def bucket_slope(buckets: Sequence[Bucket]) -> Check:
    """Least-squares slope of log10(sum_k3 / tokens) against −log10 p over the populated
    buckets: decades of per-token k3 gained per decade the sampler's probability falls."""
    name = "bucket_slope"
    points = [
        (math.log10(_representative_p(b.lo, b.hi)), math.log10(b.sum_k3 / b.tokens))
        for b in buckets
        if b.tokens >= MIN_BUCKET_TOKENS and b.sum_k3 > 0 and b.hi > 0
    ]
    if len(points) < 3:
        return not_run(
            name, SLOPE_STEEP, f"3+ probability buckets with {MIN_BUCKET_TOKENS:g}+ tokens"
        )
    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    slope = -float(np.polyfit(x, y, 1)[0])
    passed = slope >= SLOPE_STEEP
    sentence = (
        f"per-token k3 rises {fmt(slope)} decades per decade as p → 0 over {len(points)} buckets"
        + (": the mismatch sits in the low-probability tail" if passed else ": fairly flat")
    )
    return Check(name, slope, SLOPE_STEEP, passed, sentence)


def _ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks from 0, tied values sharing their mean rank."""
    _, inverse, counts = np.unique(np.asarray(values), return_inverse=True, return_counts=True)
    mean_rank = np.cumsum(counts) - counts + (counts - 1) / 2.0
    return np.asarray(mean_rank[inverse], dtype=float)


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation; 0 when either side is constant."""
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def thirds(values: Sequence[float]) -> tuple[float, float]:
    """Medians of the first and last third of a series in step order."""
    n = max(len(values) // 3, 1)
    return float(np.median(values[:n])), float(np.median(values[-n:]))


def lag_tracking(signal: Series, lag: Series) -> Check:
    """Does the signal follow the lag (trainer version − rollout weight version)? Spearman ρ
    over the common steps, with the lag above 0 on some of them. A lag that alternates (weights
    pushed every second step) is off-policy as much as a growing one; the sentence says which."""
    name = "lag_tracking"
    values, lags = finite(signal), finite(lag)
    common = sorted(set(values) & set(lags))
    if len(common) < MIN_STEPS:
        return not_run(name, LAG_RHO, f"a lag series on {MIN_STEPS}+ steps of the signal")
    lag_values = [lags[s] for s in common]
    rho = spearman([values[s] for s in common], lag_values)
    first, last = thirds(lag_values)
    passed = rho >= LAG_RHO and max(lag_values) > 0
    sentence = (
        f"the signal tracks lag with ρ = {rho:.2f} over {len(common)} steps; lag goes "
        f"{fmt(first)} → {fmt(last)}" + (": mismatch follows off-policy lag" if passed else "")
    )
    return Check(name, rho, LAG_RHO, passed, sentence)


def gpu_contrast(contrast: GpuContrast | None) -> Check:
    """This run's GPU type against another of its like-for-like group: passes when the
    interval of the ratio of medians lies above 1."""
    name = "gpu_contrast"
    if contrast is None:
        return not_run(name, 1.0, "runs of the same settings on another GPU type")
    c = contrast
    passed = c.ci_low > 1.0
    sentence = (
        f"{c.gpu} reads {fmt(c.ratio)}× {c.other} with the same settings "
        f"(interval {fmt(c.ci_low)}–{fmt(c.ci_high)})"
        + (": the GPU type alone makes a difference" if passed else ": no clear difference")
    )
    return Check(name, c.ratio, 1.0, passed, sentence)


def further_out(values: Sequence[float]) -> tuple[float, float]:
    """(median of all, the further out of that and the latest tenth's median): the latest
    tenth is at least `MIN_STEPS` values, so a run that has just begun to collapse is read by
    its latest steps, not by the steps before them."""
    overall = float(np.median(values))
    recent = float(np.median(values[-max(len(values) // 10, MIN_STEPS) :]))
    return overall, recent if abs(recent) > abs(overall) else overall


def level(
    signal: Series,
    *,
    healthy: float,
    unit: str,
    reference: Reference | None = None,
    own: signals.Signal | None = None,
    near: float = math.nan,
    bound_name: str = "the healthy bound",
) -> Check:
    """The signal's median on its family's scale against the healthy bound: over the whole
    range or its latest tenth, whichever is further out (`further_out`). Where the project's
    reference run sits lower, `REFERENCE_FACTOR` × its median is the bound: an fp32 engine's
    healthy level is ten decades below a bf16 one's, and the field's bound is a bf16 one. A
    reference at 0 sets no bound (no multiple of it is one). `own`, the member the signal was
    converted from, puts the sentence's level in its own units as well (`near`: its median)."""
    values = [v for _, v in sorted(finite(signal).items())]
    if not values:
        return not_run("level", healthy, "finite values of a mismatch signal")
    overall, median = further_out(values)
    bound, bound_is = healthy, f"{bound_name} {fmt(healthy)}"
    if reference is not None and 0 < REFERENCE_FACTOR * abs(reference.level) < healthy:
        bound = REFERENCE_FACTOR * abs(reference.level)
        bound_is = (
            f"{REFERENCE_FACTOR:g}× the project's reference run {reference.run_id} "
            f"({fmt(reference.level)})"
        )
    passed = abs(median) <= bound
    if own is not None and own.conversion != "same":
        bound_is += f" ({own.metric} {fmt(own.from_scale(bound, near) or math.nan)})"
    where = "latest median" if median != overall else "median"
    sentence = f"{where} {own_level(median, own, unit, near)} " + (
        f"within {bound_is}" if passed else f"{'beyond' if median < 0 else 'above'} {bound_is}"
    )
    return Check("level", median, bound, passed, sentence)


def precision_size(k3: Series) -> Check:
    """Is the k3 median (read as `level` reads it) the size rounding the logits to bf16 leaves:
    above what fp32 rounding can (`ROUNDING_FLOOR`), within the healthy bound (`HEALTHY_K3`)?
    A size, not a cause:
    an engine that runs the whole model in bf16 rounds as much, so attribution reads it as a
    low-precision head only where the level also stands above the project's reference."""
    name = "precision_size"
    values = [v for _, v in sorted(finite(k3).items())]
    if len(values) < MIN_STEPS:
        return not_run(name, ROUNDING_FLOOR, f"k3_kl on {MIN_STEPS}+ steps")
    _, median = further_out(values)
    passed = ROUNDING_FLOOR < median <= HEALTHY_K3
    size = (
        "the size bf16 rounding of the logits leaves"
        if passed
        else "within what fp32 rounding leaves"
        if median <= ROUNDING_FLOOR
        else "more than rounding the logits leaves"
    )
    band = f"{fmt(ROUNDING_FLOOR)} … {fmt(HEALTHY_K3)}"
    return Check(name, median, ROUNDING_FLOOR, passed, f"median k3 {fmt(median)}: {size} ({band})")
