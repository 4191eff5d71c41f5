"""Which rules watch which metric of one series, resolved once per series instead of per value.

A series here is what one actor of one run reports from one source. Its plan lists, for each
watched metric, the rules that apply with their state already looked up, so evaluating a batch
costs a dictionary lookup per watched metric and per record, not a rule match per value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from server.alarms.rules import Check, Scan, compile_rule, compile_scan, quiet_check
from server.domain.alarms import Rule, StateKey

PlanKey = tuple[str, str, str, str, str | None, tuple[tuple[str, str], ...]]


@dataclass(slots=True)
class Slot:
    """One rule on one metric of one series, with the alert state it advances."""

    rule: Rule
    check: Check
    key: StateKey
    state: dict[str, Any]
    timing: tuple[int, int, float, float]
    advances: bool  # False for a precursor's trigger metric: it only feeds the detector
    holds: bool  # a NaN or ±Inf neither breaches nor clears it (all kinds but nonfinite/precursor)
    quiet: Callable[[list[float]], bool] | None  # stateless kinds: no value of a batch breaches
    scan: Scan | None  # stateful kinds: absorb a batch that breaches nothing


Plan = list[tuple[str, list[Slot]]]


def plan_key(
    project: str, run_id: str, source: str, actor: str, gpu: str | None, labels: Mapping[str, str]
) -> PlanKey:
    return (project, run_id, source, actor, gpu, tuple(sorted(labels.items())))


def timing(rule: Rule) -> tuple[int, int, float, float]:
    """for_steps, resolve_steps, repeat_s, cooldown_s of a rule's state machine."""
    p = rule.params
    return (
        int(p.get("for_steps", 1)),
        int(p.get("resolve_steps", 3)),
        float(p.get("repeat_s", 0)),
        float(p.get("cooldown_s", 0)),
    )


def build(
    by_metric: dict[str, list[Rule]],
    states: dict[StateKey, dict[str, Any]],
    key: PlanKey,
) -> Plan:
    """The plan of one series; missing states are created in `states` (empty until used)."""
    project, run_id, source, actor, gpu, label_items = key
    labels = dict(label_items)
    base = f"{run_id}|{source}|{actor}"
    plan: Plan = []
    checks: dict[str, Check] = {}
    for metric, rules in by_metric.items():
        slots = []
        for rule in rules:
            if not rule.matches(
                project=project,
                run_id=run_id,
                labels=labels,
                source=source,
                gpu=gpu,
                metric=metric,
            ):
                continue
            precursor = rule.kind == "precursor"
            state_key = (rule.id, base if precursor else f"{base}|{metric}")
            state = states.setdefault(state_key, {})
            state.setdefault("eval", {})
            trigger = precursor and metric == rule.trigger
            check = checks.get(rule.id) or checks.setdefault(rule.id, compile_rule(rule))
            slots.append(
                Slot(
                    rule,
                    check,
                    state_key,
                    state,
                    timing(rule),
                    not trigger,
                    rule.kind not in ("nonfinite", "precursor"),
                    quiet_check(rule),
                    compile_scan(rule),
                )
            )
        if slots:
            plan.append((metric, slots))
    return plan
