"""The named checks behind a mismatch attribution: each reads one fingerprint a failure mode
leaves in a run's own metrics and returns its figure, a verdict and a sentence.

Each engine failure leaves its own fingerprint (`server.analysis.attribution` ranks them):

- `mean_offset`: median |k3 − k1| / median k3 (or the median ratio drift ×1e4); passes at
  `OFFSET_SHARE` or more with one sign on `SIGN_SHARE` of steps — raw logprobs, a sampler-only
  setting.
- `update_jump`: the signal's median at weight-update steps over its median between them; passes
  at `JUMP_RATIO` on `JUMP_HITS` of updates — state outliving a weight update.
- `bucket_slope`: decades of per-token k3 gained per decade p falls; passes at `SLOPE_STEEP` — a
  low-precision lm_head.
- `lag_tracking`: Spearman ρ of the signal against lag; passes at `LAG_RHO` with lag above 0 and
  growing — off-policy lag.
- `gpu_contrast`: this GPU type's median over another's, like for like; passes when the interval
  lies above 1 — GPU kernels.
- `level`: the signal's median on its family's scale; passes within the healthy bound — normal
  noise.

A check whose inputs the run does not log returns `passed=None` ("not run") with what it needs.
Everything here is pure: series are `{step: value}` mappings, NaN and ±Inf values are skipped.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

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
"""The ratio-drift rule's threshold (×1e-4, `server.alarms.defaults.RATIO_WHY`): a healthy token
mean of r stays within a few ×1e-4 of 1."""
JUMP_RATIO = 2.0
"""Medians of the update steps and of the steps between them: single k3 values wander by ×2–5,
medians of several far less (`server.alarms.defaults.SPIKE_WHY`), so ×2 is a real jump."""
JUMP_HITS = 2 / 3
"""Share of updates whose step sits above the 90th percentile of the steps between: a stale
state follows every update, noise about one update in ten."""
SLOPE_STEEP = 0.5
"""Decades of per-token k3 gained per decade of p lost. The write-ups' scatter plots show the
gap growing as p → 0 on every engine, so a rise alone names no cause; half a decade per decade
(k3 per token ×10 from p ≈ 0.5 down to p ≈ 0.005) is where the low-probability tail carries most
of the mismatch, which a low-precision lm_head does."""
MIN_BUCKET_TOKENS = 20.0
"""A bucket with fewer tokens says nothing about its mean k3."""
LAG_RHO = 0.6
"""Spearman ρ ≥ 0.6 over ≥ 10 steps has a chance probability under 5% without a link."""
HEALTHY_K3 = 1e-3
"""The highest k3 the field calls healthy on dense bf16 runs (METRICS.md: LMSYS 1e-5 … 1e-3,
NeMo-RL "below 1e-3 acceptable"); MoE runs sit higher, so a level above it is a look, not a
verdict."""
HEALTHY_RATIO = RATIO_DRIFT


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


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _not_run(name: str, threshold: float, needs: str) -> Check:
    return Check(name, None, threshold, None, f"not run: needs {needs}")


def sign_share(values: Sequence[float]) -> float:
    """Share of the values on the side most of them sit (0 counts on neither side)."""
    if not values:
        return 0.0
    pos = sum(v > 0 for v in values)
    neg = sum(v < 0 for v in values)
    return max(pos, neg) / len(values)


def mean_offset(k3: Series, k1: Series, ratio: Series) -> Check:
    """A steady offset of mean d = lT − lR that the KL does not explain. With k1 and k3 logged:
    per step e = k3 − k1 (= mean d + KL, zero up to noise when both sides are normalised), figure
    median |e| / median k3. With only a ratio-drift series: its median (×1e4). Either way the
    offset must keep one sign on `SIGN_SHARE` of steps."""
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
            f"{_fmt(share)}× k3: the trainer's logprobs sit steadily {side} the rollout's"
            if passed
            else f"k1 ≈ k3 within {_fmt(share)}× k3 (one sign on {signs:.0%} of steps): "
            "no offset beyond the KL itself"
        )
        return Check(name, share, OFFSET_SHARE, passed, sentence)
    drift = finite(ratio)
    if len(drift) < MIN_STEPS:
        return _not_run(
            name, OFFSET_SHARE, f"k1_kl and k3_kl, or a ratio drift, on {MIN_STEPS}+ steps"
        )
    values = list(drift.values())
    median = float(np.median(values))
    signs = sign_share(values)
    passed = abs(median) >= RATIO_DRIFT and signs >= SIGN_SHARE
    sentence = (
        f"the importance ratio drifts by {_fmt(median)} ×1e-4 with one sign on {signs:.0%} of "
        f"{len(values)} steps"
        + (": a systematic offset" if passed else f", within ±{RATIO_DRIFT:g} or unsteady")
    )
    return Check(name, median, RATIO_DRIFT, passed, sentence)


def update_steps(weight_version: Series) -> list[int]:
    """Steps whose weight version differs from the previous step's that logged one."""
    versions = sorted(finite(weight_version).items())
    return [s for (_, a), (s, b) in itertools.pairwise(versions) if b != a]


def _on_steps(updates: Sequence[int], steps: Sequence[int]) -> list[int]:
    """Each update on the first step of the signal at or after it: the first step served with
    the new weights, where a run logs the signal every few steps."""
    found = {steps[i] for u in updates if (i := bisect.bisect_left(steps, u)) < len(steps)}
    return sorted(found)


def update_jump(signal: Series, weight_version: Series) -> Check:
    """The signal at the first step served after each weight update against the steps between
    updates: what a prefix cache or KV state computed with the old weights leaves."""
    name = "update_jump"
    values = finite(signal)
    updates = _on_steps(update_steps(weight_version), sorted(values))
    at_updates = set(updates)
    between = [v for s, v in values.items() if s not in at_updates]
    if len(updates) < 2 or len(between) < 3:
        return _not_run(
            name, JUMP_RATIO, "a weight_version series with 2+ updates and steps between them"
        )
    after = [values[s] for s in updates]
    base = float(np.median(between))
    ratio = float(np.median(after)) / base if base > 0 else math.inf
    cut = float(np.quantile(between, 0.9))
    hits = sum(v > cut for v in after) / len(after)
    passed = ratio >= JUMP_RATIO and hits >= JUMP_HITS
    sentence = (
        f"the signal at the {len(after)} weight-update steps is {_fmt(ratio)}× its median "
        f"between them, {hits:.0%} of updates above the 90th percentile"
        + (": it jumps with updates and only then" if passed else ": no update-aligned jump")
    )
    return Check(name, ratio, JUMP_RATIO, passed, sentence)


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
        return _not_run(
            name, SLOPE_STEEP, f"3+ probability buckets with {MIN_BUCKET_TOKENS:g}+ tokens"
        )
    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    slope = -float(np.polyfit(x, y, 1)[0])
    passed = slope >= SLOPE_STEEP
    sentence = (
        f"per-token k3 rises {_fmt(slope)} decades per decade as p → 0 over {len(points)} buckets"
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
    over the common steps, with the lag above 0 and growing."""
    name = "lag_tracking"
    values, lags = finite(signal), finite(lag)
    common = sorted(set(values) & set(lags))
    if len(common) < MIN_STEPS:
        return _not_run(name, LAG_RHO, f"a lag series on {MIN_STEPS}+ steps of the signal")
    lag_values = [lags[s] for s in common]
    rho = spearman([values[s] for s in common], lag_values)
    first, last = thirds(lag_values)
    growing = last > first and float(np.mean(lag_values)) > 0
    passed = rho >= LAG_RHO and growing
    sentence = (
        f"the signal tracks lag with ρ = {rho:.2f} over {len(common)} steps; lag goes "
        f"{_fmt(first)} → {_fmt(last)}" + (": mismatch follows off-policy lag" if passed else "")
    )
    return Check(name, rho, LAG_RHO, passed, sentence)


def gpu_contrast(contrast: GpuContrast | None) -> Check:
    """This run's GPU type against another of its like-for-like group: passes when the
    interval of the ratio of medians lies above 1."""
    name = "gpu_contrast"
    if contrast is None:
        return _not_run(name, 1.0, "runs of the same settings on another GPU type")
    c = contrast
    passed = c.ci_low > 1.0
    sentence = (
        f"{c.gpu} reads {_fmt(c.ratio)}× {c.other} with the same settings "
        f"(interval {_fmt(c.ci_low)}–{_fmt(c.ci_high)})"
        + (": the GPU type alone makes a difference" if passed else ": no clear difference")
    )
    return Check(name, c.ratio, 1.0, passed, sentence)


def level(signal: Series, *, healthy: float, unit: str) -> Check:
    """The signal's median on its family's scale against the healthy bound: over the whole
    range and over its latest tenth (at least `MIN_STEPS` steps), whichever is further out, so
    a run that has just begun to collapse is not called healthy by the steps before it."""
    values = [v for _, v in sorted(finite(signal).items())]
    if not values:
        return _not_run("level", healthy, "finite values of a mismatch signal")
    overall = float(np.median(values))
    recent = float(np.median(values[-max(len(values) // 10, MIN_STEPS) :]))
    median = recent if abs(recent) > abs(overall) else overall
    passed = abs(median) <= healthy
    where = "latest median" if median == recent and recent != overall else "median"
    sentence = f"{where} {unit} {_fmt(median)} " + (
        f"within the healthy bound {_fmt(healthy)}" if passed else f"above {_fmt(healthy)}"
    )
    return Check("level", median, healthy, passed, sentence)
