"""Scenarios the collapse corpus does not hold, through the server's real alarm evaluation with
the default packs: a correction going blind, MoE routing replay switching off, and a nonzero step
in an exact-parity run — each rendered in the names of the frameworks that log it.

    python benchmarks/correction_scenarios.py [--seeds 200,201] [--runs 20] [--json]

The runs and their controls are drawn by `benchmarks/correction_corpus.py` (see there), which
`benchmarks/alarm_quality.py` adds to its corpus too; this script scores them alone:
- blind correction: detected by the "correction going blind" rule between onset and explosion,
  its lead (explosion − alert step); its false alarms on the controls where the mask keeps up
  with the rising gap, or falls with a flat gap.
- replay off: detected, and the delay (alert step − switch step); false alarms on the same runs
  with replay left on.
- exact parity: detected at the nonzero step; the same values on a run without the setting
  raise no exact-parity alert.

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
from benchmarks.correction_corpus import (  # noqa: E402
    MASKED_NAMES,
    REPLAY_NAMES,
    blind_trace,
    exact_trace,
    replay_trace,
    trace_of,
)

BLIND = "correction going blind"
REPLAY_RULES = ("routing replay off or degraded", "routing replay falling back")
EXACT = ("nonzero mismatch (exact parity)", "ratio off 1 (exact parity)")


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
                trace, onset, explosion = blind_trace(rng, framework, "blind")
                fired = [e.step for e in _firing(replay(trace, pack), [BLIND])]
                hit = [s for s in fired if onset <= s <= explosion]
                if hit:
                    detected += 1
                    leads.append(explosion - hit[0])
                # a rising gap the mask keeps up with is meant to alert (the vllm-kl rules):
                # only a blind alert is false there; a falling mask with a flat gap is healthy
                trace, _, _ = blind_trace(rng, framework, "keeps_up")
                false_blind += len(_firing(replay(trace, pack), [BLIND]))
                trace, _, _ = blind_trace(rng, framework, "mask_down")
                false_blind += len(_firing(control(trace), [BLIND]))
        total = runs * len(seeds)
        out["blind"][framework] = {
            "detected": f"{detected}/{total}",
            "lead_median": _median(leads),
            "false_blind_on_controls": false_blind,
        }
    for framework in REPLAY_NAMES:
        detected, delays, false_replay = 0, [], 0
        for seed in seeds:
            rng = np.random.default_rng([seed, 2, len(framework)])
            for _ in range(runs):
                trace, switch = replay_trace(rng, framework, off=True)
                fired = [e.step for e in _firing(replay(trace, pack), REPLAY_RULES)]
                after = [s for s in fired if s >= switch]
                if after:
                    detected += 1
                    delays.append(after[0] - switch)
                trace, _ = replay_trace(rng, framework, off=False)
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
            trace, at = exact_trace(rng, True)
            fired = [e.step for e in _firing(replay(trace, pack), EXACT)]
            if fired:
                detected += 1
                at_step += fired[0] == at
            plain = trace_of(trace.run_id + "-plain", trace.metrics, {})
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
