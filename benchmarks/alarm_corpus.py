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
from collections.abc import Iterator
from dataclasses import dataclass

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
_A_MAX = 3.0  # beyond this per-token gap, more tokens carry the mismatch rather than a larger one

StoredRow = tuple[int, float, dict[str, float]]
"""One step's newly stored values: (step, wall time, {metric: value})."""


@dataclass(frozen=True)
class Scale:
    healthy_steps: int  # healthy runs are drawn until they hold at least this many steps
    healthy_length: tuple[int, int]  # steps of one healthy run (inclusive range)
    collapse_runs: int
    prefix_length: tuple[int, int]  # healthy steps before a collapse's onset


SCALES = {
    "small": Scale(4_000, (1_000, 2_000), 4, (200, 500)),
    "full": Scale(200_000, (3_000, 10_000), 50, (300, 3_000)),
}


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
    metrics = {name: np.concatenate([part[name] for part in parts]) for name in METRICS}
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


def healthy_trace(
    rng: np.random.Generator, run_id: str, length: int, *, restarts: int | None = None
) -> Trace:
    """A healthy run of `length` steps (restarts drawn unless given)."""
    p = _profile(rng)
    shape = _shape(rng, p, length, length)
    step_of = _steps(rng, length)
    segments = _segments(rng, length, length, restarts)
    steps, times, metrics, ends = _assemble(rng, p, shape, step_of, segments)
    return Trace(
        run_id, "healthy", steps, times, metrics, ends, p.sigma, p.level0, len(segments) - 1
    )


def _ramp(rel: np.ndarray, start: float, length: float) -> np.ndarray:
    """0 before `start`, rising linearly to 1 over `length` steps."""
    return np.clip((rel - start) / length, 0.0, 1.0)


def collapse_trace(
    rng: np.random.Generator, run_id: str, prefix: int, *, restarts: int | None = None
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
    )


def corpus(seed: int, scale: str = "small") -> list[Trace]:
    """Healthy runs until they hold `healthy_steps` steps, then the collapse runs."""
    rng = np.random.default_rng(seed)
    size = SCALES[scale]
    traces: list[Trace] = []
    total = 0
    while total < size.healthy_steps:
        length = int(rng.integers(*size.healthy_length, endpoint=True))
        traces.append(healthy_trace(rng, f"healthy-{len(traces):03d}", length))
        total += healthy_steps(traces[-1])
    for i in range(size.collapse_runs):
        prefix = int(rng.integers(*size.prefix_length, endpoint=True))
        traces.append(collapse_trace(rng, f"collapse-{i:03d}", prefix))
    return traces


# -- what the server stores ----------------------------------------------------------------------
def first_values(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct steps, sorted, with the value that arrived first for each: the server stores
    a (step, metric) once and ignores what is re-sent."""
    distinct, first = np.unique(steps, return_index=True)
    return distinct, values[first]


def healthy_steps(trace: Trace) -> int:
    """Distinct stored steps in the healthy regime: all of a healthy run, a collapse's prefix."""
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
