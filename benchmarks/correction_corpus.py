"""Runs the collapse corpus does not hold, in the names of the frameworks that log them: a
correction going blind, MoE routing replay switching off, and a nonzero step in an exact-parity
run — each with the healthy controls that must stay quiet.

Pure (NumPy only), like `benchmarks/alarm_corpus.py`: a generator takes a
`numpy.random.Generator` and draws one run, so the caller's seeding decides reproducibility.
`benchmarks/correction_scenarios.py` scores them on their own; `benchmarks/alarm_quality.py`
adds them, per rendering that logs their metrics, to its corpus (`scenario_runs`).

- blind correction (`BLIND_NAMES`: ours, verl, prime-rl, SkyRL, ROLL): 150–300 healthy steps
  with a masked share of 1–5%, then 20–40 steps in which the gap rises ×20–×60 while the masked
  share falls to 15–40% of itself, then the gradient explodes 10 steps later. Controls of the
  same length: the gap rises as much but the mask keeps up (its share rises with the gap: the
  vllm-kl rules are meant to fire, only a blind alert is false), or the mask's share falls with
  a flat gap (a healthy run: any alert is false).
- replay off (AReaL's and NeMo-RL's names): an MoE run at k3 ≈ 3e-3 whose replay active share
  (or fallback share) is healthy, then at a drawn step the replay switches off (active 0) or
  degrades (active 0.6–0.85, or 10–40% of routes falling back). Control: the same run with
  replay left on.
- exact parity (ours and verl: their configs record `batch_invariant`): a run whose config
  records the switch, k3 exactly 0, with one nonzero step (1e-12 … 1e-6) at a drawn step.
  Control: the same values on a run without the setting.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from benchmarks.alarm_corpus import Trace

BLIND, REPLAY_OFF, EXACT_PARITY = "blind", "replay-off", "exact-parity"
SCENARIOS = (BLIND, REPLAY_OFF, EXACT_PARITY)
MASKED_NAMES = {  # framework: the name its adapter stores the masked share under
    "ours": "mis_token_rate",
    "verl": "mis_token_rate@verl",
    "prime-rl": "mis_token_rate@prime-rl",
    "skyrl": "mis_token_rate@skyrl",
    "roll": "mis_token_rate@roll",
}
GAP_NAMES: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    # framework: (its gap signal as stored, k3 -> its value)
    "ours": ("k3_kl", lambda k3: k3),
    "verl": ("k3_kl", lambda k3: k3),
    "prime-rl": ("k3_kl", lambda k3: k3),
    "skyrl": ("abs_logp_diff_mean", lambda k3: np.sqrt(k3 / 4.0)),
    "roll": ("actor/train_infer_ratio_geometric_mean", lambda k3: np.exp(-k3)),
}
REPLAY_NAMES = ("areal", "nemo-rl")
EXACT_CONFIGS: dict[str, Callable[[bool], dict[str, Any]]] = {
    # framework: where its config records the batch-invariant switch
    "verl": lambda on: {"actor_rollout_ref": {"rollout": {"batch_invariant": on}}},
    "ours": lambda on: {"rollout": {"batch_invariant": on}},
}
RENDERINGS: dict[str, tuple[str, ...]] = {
    BLIND: tuple(MASKED_NAMES),
    REPLAY_OFF: REPLAY_NAMES,
    EXACT_PARITY: tuple(EXACT_CONFIGS),
}
"""Each scenario's renderings: those that log its metrics."""


def trace_of(
    run_id: str, metrics: dict[str, np.ndarray], config: dict[str, Any] | None = None
) -> Trace:
    """A run sent live, one record per batch, ten seconds a step."""
    n = len(next(iter(metrics.values())))
    steps = np.arange(n)
    ends = np.arange(1, n + 1)
    return Trace(
        run_id, "healthy", steps, steps * 10.0, metrics, ends, 0.3, 1e-3, 0, config=config or {}
    )


def _noise(rng: np.random.Generator, n: int, sigma: float) -> np.ndarray:
    return np.exp(sigma * rng.standard_normal(n))


def blind_trace(rng: np.random.Generator, framework: str, kind: str) -> tuple[Trace, int, int]:
    """kind: "blind" (gap up, mask down), "keeps_up" (gap up, mask up), "mask_down" (flat gap);
    returns the run, its onset and its explosion step."""
    onset = int(rng.integers(150, 300))
    ramp = int(rng.integers(20, 41))
    explosion = onset + ramp + 10
    n = explosion + 30
    t = np.clip((np.arange(n) - onset) / ramp, 0, 1)
    level = 10 ** rng.uniform(-4, -2.3)
    rise = rng.uniform(20, 60)
    k3 = level * _noise(rng, n, rng.uniform(0.2, 0.5)) * (rise**t if kind != "mask_down" else 1)
    share = rng.uniform(0.01, 0.05)
    fall = rng.uniform(0.15, 0.4)
    mask_factor = {"blind": fall**t, "keeps_up": (1 + 4 * t), "mask_down": fall**t}[kind]
    masked = np.minimum(share * _noise(rng, n, 0.15) * mask_factor, 1.0)
    grad = 0.5 * _noise(rng, n, 0.1)
    if kind == "blind":
        grad[explosion:] *= 100
    gap_name, convert = GAP_NAMES[framework]
    metrics = {gap_name: convert(k3), MASKED_NAMES[framework]: masked, "grad_norm": grad}
    return trace_of(f"blind-{framework}-{kind}", metrics), onset, explosion


def replay_trace(rng: np.random.Generator, framework: str, off: bool) -> tuple[Trace, int]:
    """A run whose routing replay switches off (or, with `off` False, stays on) at the returned
    step."""
    n = int(rng.integers(200, 400))
    switch = int(rng.integers(50, n - 50))
    k3 = 3e-3 * _noise(rng, n, 0.3)
    if framework == "areal":
        name = "routing_replay_active"
        share = np.clip(1.0 - np.abs(0.003 * rng.standard_normal(n)), 0, 1)
        if off:
            share[switch:] = 0.0 if rng.random() < 0.5 else rng.uniform(0.6, 0.85)
            k3[switch:] *= 10
        metrics = {"k1_kl@areal": -k3, name: share}
    else:  # nemo-rl: the fallback share
        name = "routing_replay_fallback"
        share = np.abs(0.002 * rng.standard_normal(n))
        if off:
            share[switch:] = rng.uniform(0.1, 0.4)
            k3[switch:] *= 10
        metrics = {"k3_kl": k3, name: share}
    return trace_of(f"replay-{framework}-{'off' if off else 'on'}", metrics), switch


def exact_trace(
    rng: np.random.Generator, labelled: bool, framework: str = "verl"
) -> tuple[Trace, int]:
    """A run at k3 exactly 0 but for one step (returned); `labelled`: its config records the
    batch-invariant switch, where `framework` keeps it."""
    n = int(rng.integers(100, 300))
    at = int(rng.integers(5, n))
    k3 = np.zeros(n)
    k3[at] = 10 ** rng.uniform(-12, -6)
    config = EXACT_CONFIGS[framework](labelled)
    return trace_of(f"exact-{labelled}", {"k3_kl": k3, "grad_norm": 0.5 * _noise(rng, n, 0.1)},
                    config), at  # fmt: skip


@dataclass(frozen=True)
class ScenarioRun:
    """One run of a scenario: the event (`start`: onset, switch or nonzero step; `end`: the
    explosion a blind correction must be alerted before), or a control (`control`: "healthy",
    where any alert is false, or "keeps_up", where only the scenario's alert is)."""

    scenario: str
    trace: Trace
    start: int | None = None
    end: int | None = None
    control: str | None = None


def scenario_runs(seed: int, framework: str, runs: int) -> Iterator[ScenarioRun]:
    """`runs` of each scenario `framework` logs, each with its controls, drawn from `seed` (a
    generator per seed, framework and scenario: a scenario's draws do not depend on another's)."""
    key = zlib.crc32(framework.encode())
    if framework in MASKED_NAMES:
        rng = np.random.default_rng([seed, 11, key])
        for i in range(runs):
            trace, onset, explosion = blind_trace(rng, framework, "blind")
            yield ScenarioRun(BLIND, _named(trace, seed, i), onset, explosion)
            for kind, control in (("keeps_up", "keeps_up"), ("mask_down", "healthy")):
                trace, _, _ = blind_trace(rng, framework, kind)
                yield ScenarioRun(BLIND, _named(trace, seed, i), control=control)
    if framework in REPLAY_NAMES:
        rng = np.random.default_rng([seed, 12, key])
        for i in range(runs):
            trace, switch = replay_trace(rng, framework, off=True)
            yield ScenarioRun(REPLAY_OFF, _named(trace, seed, i), switch)
            trace, _ = replay_trace(rng, framework, off=False)
            yield ScenarioRun(REPLAY_OFF, _named(trace, seed, i), control="healthy")
    if framework in EXACT_CONFIGS:
        rng = np.random.default_rng([seed, 13, key])
        for i in range(runs):
            trace, at = exact_trace(rng, True, framework)
            yield ScenarioRun(EXACT_PARITY, _named(trace, seed, i), at)
            plain = trace_of(
                trace.run_id + "-plain", trace.metrics, EXACT_CONFIGS[framework](False)
            )
            yield ScenarioRun(EXACT_PARITY, _named(plain, seed, i), control="healthy")


def _named(trace: Trace, seed: int, i: int) -> Trace:
    """The run under an id of its own across seeds, as the corpus's runs are reported."""
    return replace(trace, run_id=f"{seed}/{trace.run_id}-{i:03d}")
