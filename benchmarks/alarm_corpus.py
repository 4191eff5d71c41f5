"""A seeded corpus of training runs for scoring alarms: healthy runs, and runs that collapse.

Pure (NumPy only): one `numpy.random.Generator` built from one seed draws every trace in order, so
the same seed gives the same corpus. A trace is what a trainer sends, in arrival order: steps,
wall times and per-step metrics, plus (collapse runs) the ground truth. `stored_batches` turns a
trace into what the server stores, i.e. what its alarm rules are fed.

Healthy runs (parameters drawn per run):
- k3 ("vllm-kl"): median level drawn log-uniform so that the whole drifted path stays within the
  field's healthy range 1e-5 … 1e-2; a drift of ×3^u (u ∈ [0.3, 1]) up or down, log-linear over
  the run (one run in four has none); log-normal noise of width σ ∈ {0.3, 0.5, 0.6, 0.8}.
- The token picture behind the ratio metrics: the gap sits on a share q ∈ [0.02, 0.1] of the
  tokens (the low-probability ones, per the write-ups), each with |d| = a, the rest match. Then
  k3 ≈ q·a²/2 gives a = √(2·k3/q) (capped at 20, the clamp of METRICS.md; q grows instead of a
  once a would pass 3); `mult_prob_error` = tok-mean(e^|d|) = 1 + q·(e^a − 1); and since
  tok-mean(r) is 1 in expectation under rollout sampling, `ratio_dev_1e4` is 10⁴ × its sampling
  error, std √q·(e^a − 1)/√n_eff with n_eff ∈ [1e4, 1e5] effective tokens per step, heavy-tailed
  (Student t, 4 dof), plus a fixed engine offset in [−2, 2]. q jitters ×e^(0.2·N) per step.
- grad_norm: log-uniform median 0.05 … 2, log-normal noise 0.1 … 0.3, slow drift; entropy
  0.3 … 1.2 with noise 0.03 … 0.1, falling up to ×0.6 over the run; reward_mean 0.1 … 0.5
  rising by up to 0.3, Gaussian noise 0.02 … 0.06; lag 0 or 1 (P(1) ∈ [0.05, 0.6]), +1 with P 0.01.
- `moe_aux_loss` (not canonical): bursts of 1–20 NaN (about one per 2,000 steps).
- Irregular spacing: a share 0 … 5% of steps skips 1–4 step numbers. Wall time 5 … 60 s a step
  (±10%), pauses of 10 min … 2 h (about one per 2,000 steps).
- Benign blips: bursts (about one per 1,500 steps) of 2–6 isolated single-step k3 blips ×3 … ×8,
  3–19 steps apart; the ratio metrics follow k3.
- Restarts (about one per 3,000 steps): the last 0–5 records before the crash never arrive; after
  2 … 30 min the run resumes from a checkpoint 10–200 steps back and re-sends that range with
  freshly computed values. The server keeps the first value of a (step, metric).
- Batches of records as a trainer flushes them: a per-run typical size 1 … 64.

Runs mismatched from their first step (`mismatch_trace`, 30–80 steps, `--scale` sets how many
per scenario): a healthy run whose token picture gains a mismatch component from step 1, with
its share jittered ×e^(0.15·N) per step (a setting is steady; the healthy gap keeps its share
of the remaining tokens), and our three metrics recomputed from the joined picture:
- `penalty` (a sampler-only repetition penalty, the rollout's logprobs processed): a balanced
  component — the rollout still samples what it reports, so tok-mean(r) stays 1 — drawn from a
  mean |d| m log-uniform in 0.02 … 0.3 and a TRL sequence ratio mean ρ in 0.3 … 0.8: ρ fixes
  s² = L·q·a² (below), a sequence length L is drawn where a = s²/(L·m) ∈ [m, 3], q = m/a.
  Its k3 ≈ m·a/2 spans 5e-4 … 0.16 (median 0.02): a penalty seen over long sequences pulls
  TRL's ratio down with a per-token gap no larger than a healthy run's. Its config records the
  penalty (`repetition_penalty` 1.05 … 1.3), as trainers record their sampling settings.
- `raw-logprobs` (raw instead of processed logprobs): a one-sided component, d = ±a on a share
  q (a ∈ 0.7 … 1), with q set by a steady ratio_dev_1e4 of ±200 … 5000 (log-uniform, either
  sign): tok-mean(r) − 1 = q·(e^(±a) − 1). With a ≈ 0.8, k1 ≈ −2·k3 and ratio_dev ≈ 3·k3·10⁴,
  what the demo's raw-logprobs engine runs show.
- `quantized` (a quantized rollout engine): a balanced component with k3 log-uniform in
  0.06 … 0.5 spread over a share q ∈ 0.3 … 1 of the tokens.

**The token picture and what each framework logs** (`benchmarks/alarm_renderings.py` renders a
trace in verl's, TRL's, OpenRLHF's, ms-swift's, slime's and NeMo-RL's names from it). A step's
picture is a few atoms: a share w_j of the tokens carries the gap d_j = log p_trainer −
log p_rollout, the rest match. The healthy gap is balanced: of its share q, q·e^(−a)/(1+e^(−a))
carries +a and the rest −a, which makes tok-mean(r) exactly 1 (r = e^d) as sampling from the
rollout requires. Over n_eff effective tokens, every token-mean estimator X of the per-token x
reads E x + √(Var x / n_eff)·ε:
- k3 = tok-mean(e^d − 1 − d) ≈ q·a²/2: the corpus's own series; verl and NeMo-RL log the same
  estimator, so they read it as it is (and NeMo's mult_prob_error too).
- k1 = tok-mean(−d). Since E(e^d − 1 − d) = E(r − 1) − E d, **k1 = k3 − (tok-mean r − 1)** in
  expectation: equal to k3 when the ratio is unbiased, −2·k3 on a raw-logprobs run; its noise
  √(Var d / n_eff) ≈ √(2·k3 / n_eff) is far above k3's own at low levels, so its sign flips on
  the healthiest runs (OpenRLHF, ms-swift, verl's second KL, slime's older `mis_kl`).
- mean |d| = Σ w_j·|d_j| = q·a for the healthy gap (TRL's `sampling_logp_difference/mean`), so
  k3 / (mean |d|)² = 1/(2q): 5 … 25 on the corpus's q, against the `ABS_D_TO_K3` of 4 the
  family converts with (the relative rules do not care: a z-score of log x is unchanged by
  x ↦ c·x²; only the vllm-kl high level does).
- tok-mean(r) − 1 = Σ w_j·(e^(d_j) − 1), 0 for a balanced gap; ratio_dev_1e4 is 10⁴ times it,
  plus its heavy-tailed sampling error and the engine's offset (as above).
- Sequence-level means (slime's `_seq`): the same expectations, with the noise of half the
  tokens (a mean over sequences weights tokens unequally).
- Truncated token ratios (verl's `rollout_is_mean`, ms-swift's `is_weight_mean`):
  tok-mean min(r, 2) = 1 + Σ w_j·(min(e^(d_j), 2) − 1): 1 until a gap passes log 2.
- TRL's sequence-level truncated ratio: one ratio per sequence, exp(Σ_t d) over its L tokens
  (L log-uniform 32 … 256 per run: TRL's default completion cap is 256). Σ_t d is about normal
  with mean L·E d and variance s² = L·Var d ≈ 2·L·k3; with E d = −k3 (balanced) the sequence
  ratio is log-normal with mean 1 before the cap, and min(·, 3) cuts its upper tail: the step's
  mean over its 32 … 256 sequences reads ≈ 1 only while s² ≪ 1 and falls as L·k3 grows (0.97
  at s² = 0.5, 0.89 at 1, 0.61 at 3, 0.19 at 10) — a healthy run at k3 = 3e-3 with 256-token
  completions reads about 0.8. On a raw-logprobs run E d > 0 and it climbs towards the cap.
- Max-type metrics sit at bounds: the largest truncated token weight is the cap whenever a
  gap passes log 2; the largest |d| is the widest gap plus an exponential tail of rare tokens,
  clamped at 20. No rule reads them.

Collapse runs: a healthy prefix of a drawn length, then from the onset step k3 rises log-linearly
by ×20 … ×200 over 10–40 steps. grad_norm starts growing e-fold every 3 … 8 steps at
(0.5 … 1) × rise + 0 … 15 steps after onset (capped at ×1000); entropy falls to ×0.2 … 0.5 over
20–40 steps from (0.3 … 0.8) × rise, with triple noise (swings); reward falls to ×0.1 … 0.5 from
when grad_norm starts. The explosion step is the first stored step at or after onset whose
grad_norm exceeds EXPLOSION_FACTOR × the median of the stored grad_norm before onset. Restarts,
blips and NaN bursts happen only before onset (pauses anywhere: they change only wall time). The
trace ends 30–99 steps after the explosion.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

SIGMAS = (0.3, 0.5, 0.6, 0.8)
K3_RANGE = (1e-5, 1e-2)
AUX = "moe_aux_loss"
METRICS = (
    "k3_kl",
    "ratio_dev_1e4",
    "mult_prob_error",
    "entropy",
    "grad_norm",
    "reward_mean",
    "lag",
    AUX,
)
EXPLOSION_FACTOR = 10.0
SEQ_LENGTH = (32.0, 256.0)  # tokens per sequence, log-uniform per run (TRL's default cap: 256)
SEQS_PER_STEP = (32, 256)  # sequences per step, uniform per run
_Q, _A = "_q", "_a"  # the token picture's share and gap, drawn beside the metrics
_A_MAX = 3.0  # beyond this per-token gap, more tokens carry the mismatch rather than a larger one

StoredRow = tuple[int, float, dict[str, float]]
"""One step's newly stored values: (step, wall time, {metric: value})."""


@dataclass(frozen=True)
class Scale:
    healthy_steps: int  # healthy runs are drawn until they hold at least this many steps
    healthy_length: tuple[int, int]  # steps of one healthy run (inclusive range)
    collapse_runs: int
    prefix_length: tuple[int, int]  # healthy steps before a collapse's onset
    mismatch_runs: int = 0  # runs per scenario mismatched from their first step
    scenario_runs: int = 0  # runs per correction scenario and rendering (correction_corpus.py)


SCALES = {
    "small": Scale(4_000, (1_000, 2_000), 4, (200, 500), 4, 2),
    "full": Scale(200_000, (3_000, 10_000), 50, (300, 3_000), 40, 20),
}


@dataclass(frozen=True, eq=False)
class Picture:
    """The token picture behind a trace's mismatch metrics, per record in arrival order: a share
    `w[:, j]` of the tokens carries the gap `d[:, j]` (log p_trainer − log p_rollout), the rest
    match; plus what a framework's estimator needs to know of the run (see the docstring)."""

    w: np.ndarray  # (records, atoms) token shares
    d: np.ndarray  # (records, atoms) gaps in nats, signed
    n_eff: float  # effective tokens per step
    offset: float  # the engine's fixed offset of ratio_dev_1e4
    length: float  # tokens per sequence
    seqs: int  # sequences per step


@dataclass(frozen=True, eq=False)
class Trace:
    """One run as a trainer sends it; the arrays are in arrival order (re-sent steps included)."""

    run_id: str
    kind: str  # healthy | collapse
    steps: np.ndarray
    times: np.ndarray
    metrics: dict[str, np.ndarray]
    batch_ends: np.ndarray  # index one past the last record of each batch
    sigma: float
    level: float  # median k3 at the start
    restarts: int
    onset: int | None = None
    explosion: int | None = None
    picture: Picture | None = None
    key: tuple[int, ...] = ()  # seeds the renderings' noise: a pure function of the trace
    scenario: str | None = None  # mismatch runs: what is wrong from step 1
    headline: tuple[tuple[str, float], ...] = ()  # mismatch runs: the scenario's drawn levels
    config: dict[str, Any] = field(default_factory=dict)  # the settings the run records


@dataclass(frozen=True)
class _Profile:
    sigma: float
    level0: float
    drift: float  # log of the k3 drift factor over the run
    q: float
    n_eff: float
    offset: float
    grad0: float
    grad_sigma: float
    grad_drift: float
    ent0: float
    ent_sigma: float
    ent_drift: float
    reward0: float
    reward_gain: float
    reward_sigma: float
    lag_p1: float


@dataclass
class _Shape:
    """Per-step medians (before noise), indexed by position in the run."""

    k3: np.ndarray
    grad: np.ndarray
    entropy: np.ndarray
    entropy_noise: np.ndarray  # multiplier of the entropy noise (swings during a collapse)
    reward: np.ndarray
    aux_nan: np.ndarray


def _profile(rng: np.random.Generator) -> _Profile:
    sigma = float(rng.choice(SIGMAS))
    drift = 0.0
    if rng.random() >= 0.25:
        drift = float(rng.choice([-1.0, 1.0]) * rng.uniform(0.3, 1.0) * math.log(3))
    lo, hi = math.log(K3_RANGE[0]), math.log(K3_RANGE[1])
    level0 = math.exp(rng.uniform(lo + max(0.0, -drift), hi - max(0.0, drift)))
    return _Profile(
        sigma=sigma,
        level0=level0,
        drift=drift,
        q=rng.uniform(0.02, 0.1),
        n_eff=math.exp(rng.uniform(math.log(1e4), math.log(1e5))),
        offset=rng.uniform(-2.0, 2.0),
        grad0=math.exp(rng.uniform(math.log(0.05), math.log(2.0))),
        grad_sigma=rng.uniform(0.1, 0.3),
        grad_drift=rng.uniform(-0.5, 0.5),
        ent0=rng.uniform(0.3, 1.2),
        ent_sigma=rng.uniform(0.03, 0.1),
        ent_drift=rng.uniform(math.log(0.6), 0.0),
        reward0=rng.uniform(0.1, 0.5),
        reward_gain=rng.uniform(0.0, 0.3),
        reward_sigma=rng.uniform(0.02, 0.06),
        lag_p1=rng.uniform(0.05, 0.6),
    )


def _shape(rng: np.random.Generator, p: _Profile, n: int, events_until: int) -> _Shape:
    """The healthy medians over `n` steps, with blips and NaN bursts before `events_until`."""
    t = np.linspace(0.0, 1.0, n)
    k3 = p.level0 * np.exp(p.drift * t)
    for _ in range(rng.poisson(events_until / 1500)):
        count = int(rng.integers(2, 7))
        at = int(rng.integers(0, events_until)) + np.cumsum(rng.integers(3, 20, count))
        at = at[at < events_until]
        k3[at] *= rng.uniform(3.0, 8.0, len(at))
    aux_nan = np.zeros(n, dtype=bool)
    for _ in range(rng.poisson(events_until / 2000)):
        start = int(rng.integers(0, events_until))
        aux_nan[start : min(events_until, start + int(rng.integers(1, 21)))] = True
    return _Shape(
        k3=k3,
        grad=p.grad0 * np.exp(p.grad_drift * t),
        entropy=p.ent0 * np.exp(p.ent_drift * t),
        entropy_noise=np.ones(n),
        reward=p.reward0 + p.reward_gain * (1.0 - np.exp(-3.0 * t)),
        aux_nan=aux_nan,
    )


def _draw(
    rng: np.random.Generator, p: _Profile, s: _Shape, pos: np.ndarray
) -> dict[str, np.ndarray]:
    """Fresh noisy values of every metric at positions `pos` (a re-computed range differs)."""
    m = len(pos)
    k3 = s.k3[pos] * np.exp(p.sigma * rng.standard_normal(m))
    q = np.minimum(1.0, np.maximum(p.q * np.exp(0.2 * rng.standard_normal(m)), 2 * k3 / _A_MAX**2))
    excess = np.expm1(np.minimum(np.sqrt(2.0 * k3 / q), 20.0))  # e^a − 1
    spread = np.sqrt(q) * excess / math.sqrt(p.n_eff)
    lag = (rng.random(m) < p.lag_p1).astype(float) + (rng.random(m) < 0.01)
    aux = 0.01 * np.exp(0.1 * rng.standard_normal(m))
    return {
        _Q: q,
        _A: np.minimum(np.sqrt(2.0 * k3 / q), 20.0),
        "k3_kl": k3,
        "ratio_dev_1e4": p.offset + 1e4 * spread * rng.standard_t(4, m) / math.sqrt(2.0),
        "mult_prob_error": 1.0 + q * excess,
        "entropy": s.entropy[pos]
        * np.exp(p.ent_sigma * s.entropy_noise[pos] * rng.standard_normal(m)),
        "grad_norm": s.grad[pos] * np.exp(p.grad_sigma * rng.standard_normal(m)),
        "reward_mean": np.clip(s.reward[pos] + p.reward_sigma * rng.standard_normal(m), 0.0, 1.0),
        "lag": lag,
        AUX: np.where(s.aux_nan[pos], np.nan, aux),
    }


def _segments(
    rng: np.random.Generator, n: int, crash_until: int, restarts: int | None
) -> list[tuple[int, int]]:
    """The positions each process of the run sends, in order: a crash loses the last 0–5
    records; the next process resumes 10–200 steps back (at or before the lost ones)."""
    count = rng.poisson(crash_until / 3000) if restarts is None else restarts
    if count == 0 or crash_until <= 250:
        return [(0, n)]
    crashes = np.sort(rng.choice(np.arange(250, crash_until), size=count, replace=False))
    segments, start = [], 0
    for crash in crashes.tolist():
        if crash - start < 300:  # too close to the previous resume
            continue
        lost = int(rng.integers(0, 6))
        back = int(rng.integers(max(10, lost), 201))
        segments.append((start, crash - lost))
        start = crash - back
    segments.append((start, n))
    return segments


def _batch_ends(rng: np.random.Generator, lengths: list[int]) -> np.ndarray:
    """Batch boundaries: sizes around a per-run typical size; a new process starts a batch."""
    typical = int(math.exp(rng.uniform(0.0, math.log(64.0))))
    lo, hi = max(1, typical // 2), min(64, 2 * typical)
    ends: list[int] = []
    offset = 0
    for length in lengths:
        cuts = np.cumsum(rng.integers(lo, hi + 1, size=length // lo + 1))
        ends.extend((offset + cuts[cuts < length]).tolist())
        ends.append(offset + length)
        offset += length
    return np.asarray(ends, dtype=np.int64)


def _assemble(
    rng: np.random.Generator,
    p: _Profile,
    shape: _Shape,
    step_of: np.ndarray,
    segments: list[tuple[int, int]],
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Arrival order of a run: steps, wall times, values and batch ends."""
    parts = [_draw(rng, p, shape, np.arange(a, b)) for a, b in segments]
    metrics = {name: np.concatenate([part[name] for part in parts]) for name in (*METRICS, _Q, _A)}
    pos = np.concatenate([np.arange(a, b) for a, b in segments])
    dts = rng.uniform(5.0, 60.0) * np.exp(0.1 * rng.standard_normal(len(pos)))
    starts = np.cumsum([b - a for a, b in segments])[:-1]
    dts[starts] += rng.uniform(120.0, 1800.0, len(starts))  # a restart's delay
    pauses = rng.poisson(len(pos) / 2000)
    dts[rng.integers(0, len(pos), pauses)] += rng.uniform(600.0, 7200.0, pauses)
    times = 1.7e9 + rng.uniform(0.0, 1e7) + np.cumsum(dts)
    ends = _batch_ends(rng, [b - a for a, b in segments])
    return step_of[pos], times, metrics, ends


def _steps(rng: np.random.Generator, n: int) -> np.ndarray:
    """Step numbers of `n` logged steps: a per-run share of 0 … 5% skips 1–4 numbers."""
    skip = rng.uniform(0.0, 0.05)
    increments = 1 + (rng.random(n) < skip) * rng.integers(1, 5, n)
    return np.cumsum(increments)


def _key(run_id: str, key: tuple[int, ...] | None) -> tuple[int, ...]:
    return key if key is not None else (zlib.crc32(run_id.encode()),)


def _picture(metrics: dict[str, np.ndarray], p: _Profile, key: tuple[int, ...]) -> Picture:
    """The balanced two-atom picture of the drawn (q, a): of the gap tokens a share e^(−a) as
    large carries +a as carries −a, so that tok-mean(r) is 1 in expectation. Sequence length and
    count come from a generator of their own (the trace's key), leaving the corpus's draws as
    they were."""
    q, a = metrics.pop(_Q), metrics.pop(_A)
    up = q / (1.0 + np.exp(a))  # q·e^(−a)/(1 + e^(−a))
    side = np.random.default_rng([*key, 0])
    return Picture(
        w=np.stack([up, q - up], axis=1),
        d=np.stack([a, -a], axis=1),
        n_eff=p.n_eff,
        offset=p.offset,
        length=math.exp(side.uniform(*np.log(SEQ_LENGTH))),
        seqs=int(side.integers(*SEQS_PER_STEP, endpoint=True)),
    )


def healthy_trace(
    rng: np.random.Generator,
    run_id: str,
    length: int,
    *,
    restarts: int | None = None,
    key: tuple[int, ...] | None = None,
) -> Trace:
    """A healthy run of `length` steps (restarts drawn unless given)."""
    p = _profile(rng)
    shape = _shape(rng, p, length, length)
    step_of = _steps(rng, length)
    segments = _segments(rng, length, length, restarts)
    steps, times, metrics, ends = _assemble(rng, p, shape, step_of, segments)
    key = _key(run_id, key)
    picture = _picture(metrics, p, key)
    return Trace(
        run_id,
        "healthy",
        steps,
        times,
        metrics,
        ends,
        p.sigma,
        p.level0,
        len(segments) - 1,
        picture=picture,
        key=key,
    )


def _ramp(rel: np.ndarray, start: float, length: float) -> np.ndarray:
    """0 before `start`, rising linearly to 1 over `length` steps."""
    return np.clip((rel - start) / length, 0.0, 1.0)


def collapse_trace(
    rng: np.random.Generator,
    run_id: str,
    prefix: int,
    *,
    restarts: int | None = None,
    key: tuple[int, ...] | None = None,
) -> Trace:
    """A run healthy for `prefix` steps that then collapses (see the module docstring)."""
    n = prefix + 400
    p = _profile(rng)
    shape = _shape(rng, p, n, prefix)
    step_of = _steps(rng, n)
    onset = int(step_of[prefix])
    rel = (step_of - onset).astype(float)
    rise = float(rng.integers(10, 41))
    shape.k3 *= np.exp(rng.uniform(math.log(20.0), math.log(200.0)) * _ramp(rel, 0.0, rise))
    grow = rise * rng.uniform(0.5, 1.0) + rng.uniform(0.0, 15.0)
    shape.grad *= np.exp(np.clip((rel - grow) / rng.uniform(3.0, 8.0), 0.0, math.log(1000.0)))
    fall = rise * rng.uniform(0.3, 0.8)
    shape.entropy *= 1.0 - (1.0 - rng.uniform(0.2, 0.5)) * _ramp(rel, fall, rng.uniform(20, 40))
    shape.entropy_noise[rel >= fall] = 3.0
    shape.reward *= 1.0 - (1.0 - rng.uniform(0.1, 0.5)) * _ramp(rel, grow, rng.uniform(20, 50))
    segments = _segments(rng, n, prefix, restarts)
    steps, times, metrics, ends = _assemble(rng, p, shape, step_of, segments)
    key = _key(run_id, key)
    picture = _picture(metrics, p, key)
    first, values = first_values(steps, metrics["grad_norm"])
    healthy = float(np.median(values[first < onset]))
    exploded = first[(first >= onset) & (values > EXPLOSION_FACTOR * healthy)]
    if not len(exploded):
        raise AssertionError(f"{run_id}: grad_norm never exploded")
    explosion = int(exploded[0])
    after = np.flatnonzero(steps > explosion + int(rng.integers(30, 100)))
    keep = int(after[0]) if len(after) else len(steps)  # restarts are all before onset
    ends = np.append(ends[ends < keep], keep)
    metrics = {name: values[:keep] for name, values in metrics.items()}
    return Trace(
        run_id,
        "collapse",
        steps[:keep],
        times[:keep],
        metrics,
        ends,
        p.sigma,
        p.level0,
        len(segments) - 1,
        onset,
        explosion,
        picture=replace(picture, w=picture.w[:keep], d=picture.d[:keep]),
        key=key,
    )


# -- runs mismatched from their first step -------------------------------------------------------
SCENARIOS = ("penalty", "raw-logprobs", "quantized")
MISMATCH_LENGTH = (30, 80)  # steps of a mismatched run
TRL_CAP = 3.0  # TRL's vllm_importance_sampling_cap: its sequence ratios are truncated here
_JITTER = 0.15  # σ in log space of a mismatch's share from step to step: a setting, not a wobble


def _lognormal_truncated_mean(s2: float, cap: float = TRL_CAP) -> float:
    """E min(X, cap) for log X ~ N(−s²/2, s²): the mean of a truncated ratio whose untruncated
    mean is 1 (Φ written with math.erf, so NumPy is all we need)."""
    if s2 <= 0.0:
        return 1.0
    s, lc = math.sqrt(s2), math.log(cap)

    def phi(x: float) -> float:
        return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))

    return phi((lc - s2 / 2) / s) + cap * (1.0 - phi((lc + s2 / 2) / s))


def _s2_for(mean: float) -> float:
    """The sequence log-ratio variance s² at which `_lognormal_truncated_mean` is `mean`."""
    lo, hi = 1e-6, 400.0
    for _ in range(100):  # decreasing in s²: bisection
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if _lognormal_truncated_mean(mid) > mean else (lo, mid)
    return math.sqrt(lo * hi)


def _balanced(q: float, a: float) -> tuple[list[float], list[float]]:
    up = q / (1.0 + math.exp(a))
    return [up, q - up], [a, -a]


def _k3_balanced(q: float, a: float) -> float:
    w, d = _balanced(q, a)
    return sum(wi * (math.exp(di) - 1.0 - di) for wi, di in zip(w, d, strict=True))


def _scenario(
    rng: np.random.Generator, scenario: str
) -> tuple[list[float], list[float], float | None, tuple[tuple[str, float], ...]]:
    """A mismatch's atoms (shares, gaps), the run's sequence length where the scenario sets it,
    and its headline levels (see the module docstring)."""
    if scenario == "penalty":
        m = math.exp(rng.uniform(math.log(0.02), math.log(0.3)))
        rho = rng.uniform(0.3, 0.8)
        s2 = _s2_for(rho)
        # a = s²/(L·m) must lie in [m, 3] (q = m/a ≤ 1, the corpus's largest gap)
        lo, hi = max(8.0, s2 / (3.0 * m)), min(2048.0, s2 / (m * m))
        length = math.exp(rng.uniform(math.log(lo), math.log(max(lo, hi))))
        a = min(3.0, s2 / (length * m))
        w, d = _balanced(m / a, a)
        return w, d, length, (("ratio_mean@trl", rho), ("abs_logp_diff_mean", m))
    if scenario == "raw-logprobs":
        dev = math.exp(rng.uniform(math.log(200.0), math.log(5000.0))) * float(
            rng.choice([-1.0, 1.0])
        )
        a = rng.uniform(0.7, 1.0) * math.copysign(1.0, dev)
        q = abs(dev / 1e4 / math.expm1(a))  # one-sided: tok-mean(r) − 1 = q·(e^a − 1)
        return [q], [a], None, (("ratio_dev_1e4", dev),)
    if scenario == "quantized":
        k3 = math.exp(rng.uniform(math.log(0.06), math.log(0.5)))
        q = rng.uniform(0.3, 1.0)
        lo, hi = 1e-4, 20.0
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if _k3_balanced(q, mid) < k3 else (lo, mid)
        w, d = _balanced(q, lo)
        return w, d, None, (("k3_kl", k3),)
    raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")


def mismatch_trace(
    rng: np.random.Generator, run_id: str, scenario: str, *, key: tuple[int, ...] | None = None
) -> Trace:
    """A healthy run with a mismatch from its first step: the scenario's atoms join the token
    picture (the healthy gap keeps its share of the tokens the mismatch leaves), and our three
    metrics follow from the joined picture."""
    base = healthy_trace(rng, run_id, int(rng.integers(*MISMATCH_LENGTH, endpoint=True)), key=key)
    assert base.picture is not None
    w0, d0, length, headline = _scenario(rng, scenario)
    n = len(base.steps)
    w = np.asarray(w0)[None, :] * np.exp(_JITTER * rng.standard_normal(n))[:, None]
    w = w * np.minimum(1.0, 0.95 / w.sum(axis=1))[:, None]
    d = np.broadcast_to(np.asarray(d0), w.shape)
    rest = 1.0 - w.sum(axis=1)
    pic = base.picture
    k3 = (w * (np.exp(d) - 1.0 - d)).sum(axis=1)
    dev = (w * np.expm1(d)).sum(axis=1)
    var_r = (w * np.expm1(d) ** 2).sum(axis=1) - dev**2
    noise = np.sqrt(var_r / pic.n_eff) * rng.standard_t(4, n) / math.sqrt(2.0)
    metrics = dict(base.metrics)
    metrics["k3_kl"] = rest * metrics["k3_kl"] + k3
    metrics["ratio_dev_1e4"] = metrics["ratio_dev_1e4"] + 1e4 * (dev + noise)
    metrics["mult_prob_error"] = (
        1.0 + rest * (metrics["mult_prob_error"] - 1.0) + (w * np.expm1(np.abs(d))).sum(axis=1)
    )
    picture = replace(
        pic,
        w=np.concatenate([pic.w * rest[:, None], w], axis=1),
        d=np.concatenate([pic.d, d], axis=1),
        length=pic.length if length is None else length,
    )
    return replace(
        base,
        kind="mismatch",
        metrics=metrics,
        picture=picture,
        scenario=scenario,
        headline=headline,
        config=_recorded(base.key, scenario),
    )


def _recorded(key: tuple[int, ...], scenario: str) -> dict[str, Any]:
    """What a mismatched run's config records of its cause: a penalty run its repetition
    penalty (1.05 … 1.3, from a generator of its own, so the corpus's draws stay as they were),
    as TRL, verl and OpenRLHF record their sampling settings; raw logprobs and a quantized
    engine record nothing the alarms read."""
    if scenario != "penalty":
        return {}
    side = np.random.default_rng([*key, 0, 2])
    return {"repetition_penalty": round(float(side.uniform(1.05, 1.3)), 2)}


def corpus(seed: int, scale: str = "small") -> list[Trace]:
    """Healthy runs until they hold `healthy_steps` steps, then the collapse runs."""
    rng = np.random.default_rng(seed)
    size = SCALES[scale]
    traces: list[Trace] = []
    total = 0
    while total < size.healthy_steps:
        length = int(rng.integers(*size.healthy_length, endpoint=True))
        key = (seed, 0, len(traces))
        traces.append(healthy_trace(rng, f"healthy-{len(traces):03d}", length, key=key))
        total += healthy_steps(traces[-1])
    for i in range(size.collapse_runs):
        prefix = int(rng.integers(*size.prefix_length, endpoint=True))
        key = (seed, 1, i)
        traces.append(collapse_trace(rng, f"collapse-{i:03d}", prefix, key=key))
    for j, scenario in enumerate(SCENARIOS):  # after the others: their draws stay as they were
        for i in range(size.mismatch_runs):
            key = (seed, 2 + j, i)
            traces.append(mismatch_trace(rng, f"{scenario}-{i:03d}", scenario, key=key))
    return traces


# -- what the server stores ----------------------------------------------------------------------
def first_values(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct steps, sorted, with the value that arrived first for each: the server stores
    a (step, metric) once and ignores what is re-sent."""
    distinct, first = np.unique(steps, return_index=True)
    return distinct, values[first]


def healthy_steps(trace: Trace) -> int:
    """Distinct stored steps in the healthy regime: all of a healthy run, a collapse's prefix,
    none of a run mismatched from its first step."""
    if trace.kind == "mismatch":
        return 0
    distinct = np.unique(trace.steps)
    return int(len(distinct) if trace.onset is None else (distinct < trace.onset).sum())


def stored_batches(trace: Trace) -> Iterator[list[StoredRow]]:
    """Each batch as the server's write path leaves it for the alarm rules: records of one step
    within a batch merged (first value wins), values already stored dropped, and a step with
    nothing new left out. Only newly stored values reach evaluation."""
    columns = {name: values.tolist() for name, values in trace.metrics.items()}
    steps, times = trace.steps.tolist(), trace.times.tolist()
    stored: set[tuple[int, str]] = set()
    start = 0
    for end in trace.batch_ends.tolist():
        merged: dict[int, StoredRow] = {}
        for i in range(start, end):
            row = merged.setdefault(steps[i], (steps[i], times[i], {}))
            for name, values in columns.items():
                row[2].setdefault(name, values[i])
        batch = []
        for step, at, values in merged.values():
            fresh = {k: v for k, v in values.items() if (step, k) not in stored}
            stored.update((step, k) for k in fresh)
            if fresh:
                batch.append((step, at, fresh))
        yield batch
        start = end
