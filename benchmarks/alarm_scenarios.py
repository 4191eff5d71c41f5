"""The correction scenarios in the alarm-quality benchmark: how each rendering that logs their
metrics hears of a correction going blind, routing replay switching off and a nonzero step in
an exact-parity run (`benchmarks/correction_corpus.py` draws them and their controls).

Per rendering and scenario:
- detection: the share of the scenario's runs on which a rule answering it (`scenario_rules`)
  fires in its window — a blind correction between its onset and its explosion, replay off and
  exact parity at or after the switch or the nonzero step;
- lead (a blind correction): explosion step − the first alert's step, median over detected runs;
  delay (replay off, exact parity): the first alert's step − the event's step, median;
- false on controls: the scenario's own alerts on its controls. The healthy controls (a mask
  falling with a flat gap, replay left on, the same values without the exact-parity setting)
  are also scored with the corpus's healthy runs, where every alert of any rule on them is a
  false alarm; the blind controls whose mask keeps up with a rising gap are not healthy (the
  vllm-kl rules are meant to fire there) and count here only.

Targets (`TARGETS`): a blind correction as a collapse is held (≥ 95% detected before the
explosion, median lead ≥ 10 steps), replay off within the 3 steps its rules wait (≥ 95%), an
exact-parity run at its very step (all of them), and no scenario alert on a control.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.correction_corpus import BLIND, EXACT_PARITY, REPLAY_OFF, ScenarioRun
from server.domain import signals
from server.domain.exact_parity import EXACT_PARITY_LABEL

if TYPE_CHECKING:
    from benchmarks.alarm_quality import Event

Spec = Mapping[str, Any]
TARGETS: dict[str, dict[str, tuple[float, str]]] = {  # scenario: figure: (bound, max|min)
    BLIND: {
        "detection_rate": (0.95, "min"),
        "lead_steps_median": (10.0, "min"),
        "false_on_controls": (0.0, "max"),
    },
    REPLAY_OFF: {
        "detection_rate": (0.95, "min"),
        "delay_steps_median": (3.0, "max"),
        "false_on_controls": (0.0, "max"),
    },
    EXACT_PARITY: {
        "detection_rate": (1.0, "min"),
        "delay_steps_median": (0.0, "max"),
        "false_on_controls": (0.0, "max"),
    },
}


def scenario_rules(pack: Sequence[Spec]) -> dict[str, set[str]]:
    """Names of the rules that answer each scenario: a diverging rule that follows the masked
    share (blind), a rule on routing replay (replay off), a rule for runs labelled exact-parity."""
    replay = {signals.REPLAY, *signals.members(signals.REPLAY), "routing_replay_fallback"}

    def answers(spec: Spec) -> str | None:
        follow = spec.get("params", {}).get("follow", ())
        if spec["kind"] == "diverging" and signals.MASKED in follow:
            return BLIND
        if spec.get("metric") in replay:
            return REPLAY_OFF
        if EXACT_PARITY_LABEL in str(spec.get("label") or ""):
            return EXACT_PARITY
        return None

    out: dict[str, set[str]] = {BLIND: set(), REPLAY_OFF: set(), EXACT_PARITY: set()}
    for spec in pack:
        scenario = answers(spec)
        if scenario is not None:
            out[scenario].add(spec["name"])
    return out


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if len(values) else None


def score_scenarios(
    outcomes: Sequence[tuple[ScenarioRun, Sequence[Event]]], pack: Sequence[Spec]
) -> dict[str, dict[str, Any]]:
    """Each scenario's figures, targets and verdict from its runs and their alerts."""
    rules = scenario_rules(pack)
    tallies: dict[str, dict[str, Any]] = {}
    for run, events in outcomes:
        t = tallies.setdefault(
            run.scenario, {"runs": 0, "controls": 0, "marks": [], "false": 0, "missed": []}
        )
        steps = [e.step for e in events if e.kind == "firing" and e.rule in rules[run.scenario]]
        if run.control is not None:
            t["controls"] += 1
            t["false"] += len(steps)
            continue
        assert run.start is not None
        t["runs"] += 1
        end = run.end if run.scenario == BLIND else None
        hit = [s for s in steps if s >= run.start and (end is None or s <= end)]
        if not hit:
            t["missed"].append(run.trace.run_id)
        elif end is not None:
            t["marks"].append(float(end - hit[0]))
        else:
            t["marks"].append(float(hit[0] - run.start))
    out = {}
    for scenario, t in sorted(tallies.items()):
        mark = "lead_steps_median" if scenario == BLIND else "delay_steps_median"
        figures: dict[str, Any] = {
            "runs": t["runs"],
            "detected": len(t["marks"]),
            "detection_rate": round(len(t["marks"]) / t["runs"], 4) if t["runs"] else None,
            mark: _median(t["marks"]),
            "controls": t["controls"],
            "false_on_controls": t["false"],
            "missed": t["missed"],
        }
        figures["targets"] = _verdicts(figures, TARGETS[scenario])
        figures["pass"] = all(v["pass"] for v in figures["targets"].values())
        out[scenario] = figures
    return out


def _verdicts(
    figures: Mapping[str, Any], targets: Mapping[str, tuple[float, str]]
) -> dict[str, dict[str, Any]]:
    out = {}
    for name, (bound, sense) in targets.items():
        value = figures[name]
        met = value is not None and (value <= bound if sense == "max" else value >= bound)
        out[name] = {sense: bound, "value": value, "pass": met}
    return out


def table(renderings: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One row per rendering and scenario it logs."""
    rows = [["rendering", "scenario", "detected", "lead / delay (median)", "false on ctrl", "pass"]]
    for name, f in renderings.items():
        for scenario, s in f.get("scenarios", {}).items():
            word = "lead" if "lead_steps_median" in s else "delay"
            value = s[f"{word}_steps_median"]
            mark = "—" if value is None else f"{word} {value:.1f}"
            cell = f"{s['detected']}/{s['runs']}"
            ok = "yes" if s["pass"] else "NO"
            rows.append([name, scenario, cell, mark, str(s["false_on_controls"]), ok])
    if len(rows) == 1:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines
