"""Alarm quality: false alarms on healthy runs, detection and lead time on runs that collapse.

    python benchmarks/alarm_quality.py [--json] [--seed N] [--scale small|full] [--pack FILE]

A seeded corpus (`benchmarks/alarm_corpus.py`) of healthy runs and of runs whose vllm-kl rises
before grad_norm explodes is replayed, trace by trace, through the server's real alarm
evaluation with a rule pack (the default pack unless `--pack` names a JSON list of rule specs),
and the alerts are scored:

- false alarms: firing transitions on a healthy run, or on a collapse run before its onset, per
  10,000 healthy-regime steps (distinct stored steps of healthy runs plus collapse prefixes),
  counted by severity (warning, critical; info apart);
- detection: a collapse run is detected when a rule watching k3_kl (its metric is k3_kl, the
  collapse precursor included) fires at or after onset and no later than the explosion step +
  GRACE_STEPS; an alert already open before onset does not announce the collapse;
- lead time: explosion step − step of the first k3 alert at or after onset, over detected runs
  (median and 10th percentile, linear interpolation);
- placebo detection: the share of collapse runs where a k3 rule fires in a window as long as the
  detection window but ending just before onset, when nothing is wrong yet — what a rule that
  fires often "detects" by chance.

`--scale full` holds ≥ 200,000 healthy steps and 50 collapse runs; `small` is for tests. The last
line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.alarm_corpus import Trace, corpus, healthy_steps, stored_batches  # noqa: E402
from benchmarks.common import machine  # noqa: E402
from server.domain import signals  # noqa: E402

GRACE_STEPS = 5  # an alert this many steps after the explosion still counts (one batch late)
TARGETS = {  # name: (bound, "max" or "min")
    "false_alarms_per_10k_steps": (0.5, "max"),
    "critical_false_alarms_per_10k_steps": (0.0, "max"),
    "detection_rate": (1.0, "min"),
    "lead_steps_median": (10.0, "min"),
}
LEVELS = ((1e-5, "1e-5"), (1e-4, "1e-4"), (1e-3, "1e-3"))  # decades of a run's starting k3 median
Spec = Mapping[str, Any]


class Event(NamedTuple):
    """One alert transition as a person would hear of it; `metric` is the one it fired on.
    Within a step, a resolution sorts before a firing (an alert closes, the next one opens)."""

    rule: str
    severity: str
    kind: str  # firing | resolved | no_data
    step: int
    metric: str


def replay(trace: Trace, pack: Sequence[Spec]) -> list[Event]:
    """The alert transitions the server raises for `trace` under `pack`.

    The only contact with the server's alarm code (its imports are here, so that the rest of the
    benchmark does not depend on where the server keeps things): the pack's rules for one
    project go through the server's replay (`server.alarms.replay`, what `mismatch alarm
    backtest` runs), which feeds them to the `Evaluator` that the live alarm service feeds on
    every ingest — each batch's newly stored values as the write path hands them, the run's own
    wall time as the clock (so `cooldown_s`, `repeat_s` and the no-data check see the run's real
    pace). The timer-driven "stalled" kind is left out.
    """
    from server.alarms.replay import replay as replay_rules
    from server.domain.alarms import Rule
    from server.domain.records import StoredRecord

    project = "quality"
    rules = [Rule(id=f"r{i:02d}", project=project, **spec) for i, spec in enumerate(pack)]
    batches = (
        [
            StoredRecord(trace.run_id, project, {}, "trainer", "t0", step, at, None, None, v)
            for step, at, v in batch
        ]
        for batch in stored_batches(trace)
    )
    events = [
        Event(f.rule.name, f.rule.severity, f.transition.kind, f.transition.step, f.metric)
        for f in replay_rules(rules, batches)
        if f.transition.kind in ("firing", "resolved", "no_data")
    ]
    return sorted(events, key=lambda e: (e.step, e.kind == "firing", e.rule))


def default_pack() -> list[dict[str, Any]]:
    """The rule pack every new project gets: what `--pack` replaces."""
    from server.alarms.defaults import PACK

    return [dict(spec) for spec in PACK]


# -- scoring ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Truth:
    """What scoring needs of a trace: its kind, healthy-regime steps and collapse steps."""

    run_id: str
    kind: str
    healthy_steps: int
    onset: int | None = None
    explosion: int | None = None
    level: float | None = None


def truth(trace: Trace) -> Truth:
    """The ground truth of a generated trace; `level` is its starting k3 median."""
    return Truth(
        trace.run_id,
        trace.kind,
        healthy_steps(trace),
        trace.onset,
        trace.explosion,
        trace.level,
    )


def k3_rules(pack: Sequence[Spec]) -> set[str]:
    """Names of the rules that watch vllm-kl: metric k3_kl or its signal family, or a precursor
    triggered by either."""

    def reads_k3(name: object) -> bool:
        return isinstance(name, str) and "k3_kl" in signals.members(name)

    return {
        spec["name"]
        for spec in pack
        if reads_k3(spec.get("metric"))
        or (
            spec["kind"] == "precursor"
            and reads_k3(spec.get("params", {}).get("trigger_metric", "k3_kl"))
        )
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile with linear interpolation between order statistics; None if empty."""
    return float(np.percentile(values, q)) if len(values) else None


def _per_10k(count: int, steps: int) -> float:
    return round(count * 10_000 / steps, 3) if steps else 0.0


def _level(value: float | None) -> str | None:
    if value is None:
        return None
    return next((name for bound, name in reversed(LEVELS) if value >= bound), LEVELS[0][1])


@dataclass
class _Tally:
    """Counts gathered over the traces, before they become rates."""

    watches_k3: set[str]
    grace: int
    false: Counter[str] = field(default_factory=Counter)  # rule -> false firing transitions
    by_severity: Counter[str] = field(default_factory=Counter)
    by_level: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    leads: list[float] = field(default_factory=list)
    rule_leads: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    missed: list[str] = field(default_factory=list)
    placebo: int = 0

    def add(self, t: Truth, events: Sequence[Event]) -> None:
        level = self.by_level[_level(t.level) or "unknown"]
        level["steps"] += t.healthy_steps
        onset = t.onset if t.kind == "collapse" else None
        first: dict[str, int] = {}  # rule -> step of its first firing at or after onset
        for e in sorted((e for e in events if e.kind == "firing"), key=lambda e: e.step):
            if onset is None or e.step < onset:
                self.false[e.rule] += 1
                self.by_severity[e.severity] += 1
                level[e.severity] += 1
            else:
                first.setdefault(e.rule, e.step)
        if onset is None or t.explosion is None:
            return
        on_time = {r: s for r, s in first.items() if s <= t.explosion + self.grace}
        window = t.explosion + self.grace - onset + 1
        self.placebo += any(
            e.kind == "firing" and e.rule in self.watches_k3 and onset - window <= e.step < onset
            for e in events
        )
        for rule, step in on_time.items():
            self.rule_leads[rule].append(t.explosion - step)
        k3_steps = [s for r, s in on_time.items() if r in self.watches_k3]
        if k3_steps:
            self.leads.append(t.explosion - min(k3_steps))
        else:
            self.missed.append(t.run_id)


def score(
    outcomes: Sequence[tuple[Truth, Sequence[Event]]],
    pack: Sequence[Spec],
    *,
    grace: int = GRACE_STEPS,
) -> dict[str, Any]:
    """Pack and per-rule figures from each trace's truth and the events replay raised for it."""
    tally = _Tally(k3_rules(pack), grace)
    for t, events in outcomes:
        tally.add(t, events)
    steps = sum(t.healthy_steps for t, _ in outcomes)
    collapse = sum(1 for t, _ in outcomes if t.kind == "collapse")
    severity = {spec["name"]: spec.get("severity", "warning") for spec in pack}
    names = [spec["name"] for spec in pack if spec["kind"] != "stalled"]
    return {
        "false_alarms_per_10k_steps": _per_10k(tally.by_severity["warning"], steps),
        "critical_false_alarms_per_10k_steps": _per_10k(tally.by_severity["critical"], steps),
        "info_false_alarms_per_10k_steps": _per_10k(tally.by_severity["info"], steps),
        "detection_rate": round(len(tally.leads) / collapse, 4) if collapse else None,
        "lead_steps_median": percentile(tally.leads, 50),
        "lead_steps_p10": percentile(tally.leads, 10),
        "per_rule": {
            name: {
                "severity": severity[name],
                "watches_k3": name in tally.watches_k3,
                "false_alarms": tally.false[name],
                "false_alarms_per_10k_steps": _per_10k(tally.false[name], steps),
                "detections": len(tally.rule_leads[name]),
                "lead_steps_median": percentile(tally.rule_leads[name], 50),
            }
            for name in names
        },
        "false_alarms_by_k3_level": {
            name: {
                "healthy_steps": c["steps"],
                "warning_per_10k_steps": _per_10k(c["warning"], c["steps"]),
                "critical_per_10k_steps": _per_10k(c["critical"], c["steps"]),
            }
            for name, c in sorted(tally.by_level.items())
        },
        "healthy_steps": steps,
        "healthy_runs": sum(1 for t, _ in outcomes if t.kind == "healthy"),
        "collapse_runs": collapse,
        "missed_runs": tally.missed,
        "placebo_detection_rate": round(tally.placebo / collapse, 4) if collapse else None,
        "grace_steps": grace,
    }


def verdicts(figures: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target with its bound, the measured value and whether it is met (None fails)."""
    out = {}
    for name, (bound, sense) in TARGETS.items():
        value = figures[name]
        met = value is not None and (value <= bound if sense == "max" else value >= bound)
        out[name] = {sense: bound, "value": value, "pass": met}
    return out


def run(traces: Sequence[Trace], pack: Sequence[Spec]) -> dict[str, Any]:
    """Replay every trace under `pack` and score the lot."""
    return score([(truth(trace), replay(trace, pack)) for trace in traces], pack)


def _report(figures: Mapping[str, Any]) -> list[str]:
    lines = [
        f"healthy: {figures['healthy_runs']} runs, {figures['healthy_steps']:,} steps; "
        f"collapse: {figures['collapse_runs']} runs",
        f"false alarms per 10k healthy steps: warning {figures['false_alarms_per_10k_steps']}, "
        f"critical {figures['critical_false_alarms_per_10k_steps']}, "
        f"info {figures['info_false_alarms_per_10k_steps']}",
        f"detection {figures['detection_rate']}; lead steps median {figures['lead_steps_median']}"
        f", p10 {figures['lead_steps_p10']}",
    ]
    for name, r in figures["per_rule"].items():
        lines.append(
            f"  {name:<20} {r['severity']:<8} false/10k {r['false_alarms_per_10k_steps']:>8} "
            f"detections {r['detections']:>3} lead median {r['lead_steps_median']}"
        )
    for name, v in figures["targets"].items():
        lines.append(f"target {name}: {v}")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", choices=("small", "full"), default="full")
    parser.add_argument("--pack", type=Path, help="a JSON list of rule specs (default pack else)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # one log line per alert would drown the report
    say = (lambda *a: None) if args.json else print
    pack = json.loads(args.pack.read_text()) if args.pack else default_pack()
    say(f"machine: {machine()}")
    started = time.perf_counter()
    traces = corpus(args.seed, args.scale)
    figures = run(traces, pack)
    figures["targets"] = verdicts(figures)
    figures["pass"] = all(v["pass"] for v in figures["targets"].values())
    figures.update(
        seed=args.seed,
        scale=args.scale,
        pack="default" if args.pack is None else args.pack.name,
        elapsed_s=round(time.perf_counter() - started, 1),
        machine=machine(),
    )
    for line in _report(figures):
        say(line)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
