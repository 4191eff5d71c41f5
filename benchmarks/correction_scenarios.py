"""Scenarios the collapse corpus does not hold, through the server's real alarm evaluation with
the default packs: a correction going blind, MoE routing replay switching off, and a nonzero step
in an exact-parity run — each rendered in the names of the frameworks that log it.

    python benchmarks/correction_scenarios.py [--seeds 200,201] [--runs 20] [--json]

- blind correction (verl, prime-rl, SkyRL, ROLL, ours): 150–300 healthy steps with a masked share
  of 1–5%, then 20–40 steps in which the gap rises ×20–×60 while the masked share falls to
  15–40% of itself, then the gradient explodes 10 steps later. Scored: detected by the "correction
  going blind" rule between onset and explosion, its lead (explosion − alert step); and its
  false alarms on controls of the same length where the gap rises as much but the mask keeps up
  (its share rises with the gap), or the mask's share falls with a flat gap.
- replay off (AReaL's and NeMo-RL's names): an MoE run at k3 ≈ 3e-3 whose replay active share
  (or fallback share) is healthy, then at a drawn step the replay switches off (active 0) or
  degrades (active 0.6–0.85, or 10–40% of routes falling back). Scored: detected, and the delay
  (alert step − switch step); false alarms on the same runs with replay left on.
- exact parity (verl's names): a run whose config records `batch_invariant: true`, k3 exactly
  0, with one nonzero step (1e-12 … 1e-6) at a drawn step. Scored: detected at that very step;
  the same values on a run without the setting raise no exact-parity alert.

Each scenario's healthy controls are also checked against every rule of the packs: the alarm
targets say at most 0.5 warning and no critical false alarms per 10,000 healthy steps. The last
line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.alarm_corpus import Trace  # noqa: E402
from benchmarks.alarm_quality import Event, default_pack, replay  # noqa: E402

BLIND = "correction going blind"
REPLAY_RULES = ("routing replay off or degraded", "routing replay falling back")
EXACT = ("nonzero mismatch (exact parity)", "ratio off 1 (exact parity)")
MASKED_NAMES = {  # framework: the name its adapter stores the masked share under
    "ours": "mis_token_rate",
    "verl": "mis_token_rate@verl",
    "prime-rl": "mis_token_rate@prime-rl",
    "skyrl": "mis_token_rate@skyrl",
    "roll": "mis_token_rate@roll",
}
GAP_NAMES = {  # framework: (its gap signal as stored, k3 -> its value)
    "ours": ("k3_kl", lambda k3: k3),
    "verl": ("k3_kl", lambda k3: k3),
    "prime-rl": ("k3_kl", lambda k3: k3),
    "skyrl": ("abs_logp_diff_mean", lambda k3: np.sqrt(k3 / 4.0)),
    "roll": ("actor/train_infer_ratio_geometric_mean", lambda k3: np.exp(-k3)),
}


def _trace(
    run_id: str, metrics: dict[str, np.ndarray], config: dict[str, Any] | None = None
) -> Trace:
    n = len(next(iter(metrics.values())))
    steps = np.arange(n)
    ends = np.arange(1, n + 1)  # one record per batch, as a trainer sends them live
    return Trace(
        run_id, "healthy", steps, steps * 10.0, metrics, ends, 0.3, 1e-3, 0, config=config or {}
    )


def _noise(rng: np.random.Generator, n: int, sigma: float) -> np.ndarray:
    return np.exp(sigma * rng.standard_normal(n))


# -- blind correction ------------------------------------------------------------------------------
def _blind(rng: np.random.Generator, framework: str, kind: str) -> tuple[Trace, int, int]:
    """kind: "blind" (gap up, mask down), "keeps_up" (gap up, mask up), "mask_down" (flat gap)."""
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
    return _trace(f"blind-{framework}-{kind}", metrics), onset, explosion


# -- routing replay --------------------------------------------------------------------------------
def _replay(rng: np.random.Generator, framework: str, off: bool) -> tuple[Trace, int]:
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
    return _trace(f"replay-{framework}-{'off' if off else 'on'}", metrics), switch


# -- exact parity ---------------------------------------------------------------------------------
def _exact(rng: np.random.Generator, labelled: bool) -> tuple[Trace, int]:
    n = int(rng.integers(100, 300))
    at = int(rng.integers(5, n))
    k3 = np.zeros(n)
    k3[at] = 10 ** rng.uniform(-12, -6)
    config = {"actor_rollout_ref": {"rollout": {"batch_invariant": labelled}}}
    return _trace(f"exact-{labelled}", {"k3_kl": k3, "grad_norm": 0.5 * _noise(rng, n, 0.1)},
                  config), at  # fmt: skip


def _firing(events: list[Event], names: Sequence[str]) -> list[Event]:
    return [e for e in events if e.kind == "firing" and e.rule in names]


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def run(seeds: Sequence[int], runs: int) -> dict[str, Any]:
    pack = default_pack()
    out: dict[str, Any] = {"blind": {}, "replay": {}, "exact": {}, "controls": {}}
    control_steps = 0
    control_alarms = {"warning": 0, "critical": 0}

    def control(trace: Trace) -> list[Event]:
        """A healthy run: every alert of every rule on it is a false alarm."""
        nonlocal control_steps
        events = replay(trace, pack)
        control_steps += len(trace.steps)
        for e in events:
            if e.kind == "firing" and e.severity in control_alarms:
                control_alarms[e.severity] += 1
        return events

    for framework in MASKED_NAMES:
        detected, leads, false_blind = 0, [], 0
        for seed in seeds:
            rng = np.random.default_rng([seed, 1, len(framework)])
            for _ in range(runs):
                trace, onset, explosion = _blind(rng, framework, "blind")
                fired = [e.step for e in _firing(replay(trace, pack), [BLIND])]
                hit = [s for s in fired if onset <= s <= explosion]
                if hit:
                    detected += 1
                    leads.append(explosion - hit[0])
                # a rising gap the mask keeps up with is meant to alert (the vllm-kl rules):
                # only a blind alert is false there; a falling mask with a flat gap is healthy
                trace, _, _ = _blind(rng, framework, "keeps_up")
                false_blind += len(_firing(replay(trace, pack), [BLIND]))
                trace, _, _ = _blind(rng, framework, "mask_down")
                false_blind += len(_firing(control(trace), [BLIND]))
        total = runs * len(seeds)
        out["blind"][framework] = {
            "detected": f"{detected}/{total}",
            "lead_median": _median(leads),
            "false_blind_on_controls": false_blind,
        }
    for framework in ("areal", "nemo-rl"):
        detected, delays, false_replay = 0, [], 0
        for seed in seeds:
            rng = np.random.default_rng([seed, 2, len(framework)])
            for _ in range(runs):
                trace, switch = _replay(rng, framework, off=True)
                fired = [e.step for e in _firing(replay(trace, pack), REPLAY_RULES)]
                after = [s for s in fired if s >= switch]
                if after:
                    detected += 1
                    delays.append(after[0] - switch)
                trace, _ = _replay(rng, framework, off=False)
                false_replay += len(_firing(control(trace), REPLAY_RULES))
        out["replay"][framework] = {
            "detected": f"{detected}/{runs * len(seeds)}",
            "delay_median": _median([float(d) for d in delays]),
            "false_alarms_with_replay_on": false_replay,
        }
    detected, at_step, unlabelled = 0, 0, 0
    for seed in seeds:
        rng = np.random.default_rng([seed, 3])
        for _ in range(runs):
            trace, at = _exact(rng, labelled=True)
            fired = [e.step for e in _firing(replay(trace, pack), EXACT)]
            if fired:
                detected += 1
                at_step += fired[0] == at
            plain = _trace(trace.run_id + "-plain", trace.metrics, {})
            unlabelled += len(_firing(control(plain), EXACT))
    total = runs * len(seeds)
    out["exact"] = {
        "detected": f"{detected}/{total}",
        "at_the_nonzero_step": f"{at_step}/{total}",
        "alerts_on_the_same_values_unlabelled": unlabelled,
    }
    per_10k = {k: round(v * 1e4 / max(control_steps, 1), 3) for k, v in control_alarms.items()}
    out["controls"] = {"steps": control_steps, "false_alarms_per_10k": per_10k}
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="200,201", help="comma-separated seeds")
    parser.add_argument("--runs", type=int, default=20, help="runs per scenario and seed")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.perf_counter()
    figures = run(seeds, args.runs)
    figures["seconds"] = round(time.perf_counter() - started, 1)
    figures["machine"] = (
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    )
    if not args.json:
        print(f"seeds {seeds}, {args.runs} runs per scenario and seed, {figures['seconds']} s")
        for scenario in ("blind", "replay"):
            for framework, row in figures[scenario].items():
                print(f"{scenario:7} {framework:9} {row}")
        print(f"exact   {figures['exact']}")
        print(f"controls {figures['controls']}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
