"""Which rules watch which metric of one series, resolved once per series instead of per value.

A series here is what one actor of one run reports from one source. Its plan lists, for each
watched metric, the rules that apply with their state already looked up, so evaluating a batch
costs a dictionary lookup per watched metric and per record, not a rule match per value.

A rule on a signal family (`signals.VLLM_KL`, `signals.RATIO`) watches one member per series:
the strongest the series has logged so far. Its checks see the member's values converted to the
family's scale and report value and threshold back in the member's own units. A plan remembers
which stronger members it did not see yet (`Plan.stronger`): a batch that brings one gets the
series a new plan, and the family's rules a new state on that member.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from server.alarms.evaluating.book import StateBook
from server.alarms.evaluating.rules import (
    Check,
    Scan,
    Verdict,
    compile_rule,
    compile_scan,
    quiet_check,
)
from server.domain import signals
from server.domain.alarm_keys import StateKey, StreamKey
from server.domain.alarms import Rule
from server.domain.metrics import split_dimension, with_dimensions

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


class Plan(list[tuple[str, list[Slot]]]):
    """(metric, slots) pairs of one series, the stream it reads, and the family members that
    would change it."""

    stronger: frozenset[str] = frozenset()

    def __init__(self, stream: StreamKey) -> None:
        super().__init__()
        self.stream = stream

    def state_keys(self) -> list[StateKey]:
        return [slot.key for _, slots in self for slot in slots]


def plan_key(
    project: str, run_id: str, source: str, actor: str, gpu: str | None, labels: Mapping[str, str]
) -> PlanKey:
    return (project, run_id, source, actor, gpu, tuple(sorted(labels.items())))


def stream_of(key: PlanKey) -> StreamKey:
    return StreamKey(*key[:4])


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
    book: StateBook,
    key: PlanKey,
    present: Collection[str] = (),
) -> Plan:
    """The plan of one series whose records so far logged the metric names in `present`;
    missing states are created in `book` (empty until used)."""
    project, run_id, source, _, gpu, label_items = key
    labels = dict(label_items)
    stream = stream_of(key)
    plan = Plan(stream)
    stronger: set[str] = set()
    checks: dict[tuple[str, str | None], tuple[Check, Scan | None, Any]] = {}
    # each environment's series of an indexed metric (`k3_kl{env=gsm8k}`) is watched as that
    # metric is, by the rules that read one metric at a time
    dimensioned = [
        (name, by_metric[base])
        for name in sorted(present)
        if name.endswith("}") and name not in by_metric
        for base, dims in [split_dimension(name)]
        if dims and base in by_metric
    ]
    for metric, rules in [*by_metric.items(), *dimensioned]:
        base, dims = split_dimension(metric) if metric.endswith("}") else (metric, {})
        slots = []
        for rule in rules:
            if dims and rule.paired:
                continue
            if not rule.matches(
                project=project,
                run_id=run_id,
                labels=labels,
                source=source,
                gpu=gpu,
                metric=metric,
            ):
                continue
            family = _family_of(rule, base)
            signal = None
            if family is not None:
                scope = present if not dims else _same_dimensions(present, dims)
                signal = signals.strongest(family, scope)
                ranked = signals.members(family)
                cut = ranked.index(signal.metric) if signal is not None else len(ranked)
                stronger.update(with_dimensions(m, dims) for m in ranked[:cut])
                if signal is None or signal.metric != base:
                    continue  # the series is watched through a stronger member
            paired = rule.paired
            state_key = (
                StateKey.of_stream(rule.id, stream)
                if paired
                else StateKey.of_metric(rule.id, stream, metric)
            )
            state = book.state(state_key)
            state.setdefault("eval", {})
            trigger = paired and metric in signals.members(rule.trigger)
            compiled_key = (rule.id, signal.metric if signal is not None else None)
            compiled = checks.get(compiled_key)
            if compiled is None:
                compiled = checks[compiled_key] = _compile(rule, signal)
            check, scan, quiet = compiled
            slots.append(
                Slot(
                    rule,
                    check,
                    state_key,
                    state,
                    timing(rule),
                    not trigger,
                    rule.kind != "nonfinite" and not paired,
                    quiet,
                    scan,
                )
            )
        if slots:
            plan.append((metric, slots))
    plan.stronger = frozenset(stronger)
    return plan


def _same_dimensions(present: Collection[str], dims: dict[str, str]) -> set[str]:
    """The base names of the series in `present` that carry exactly `dims`."""
    out = set()
    for name in present:
        base, found = split_dimension(name)
        if found == dims:
            out.add(base)
    return out


def _family_of(rule: Rule, metric: str) -> str | None:
    """The signal family through which `rule` watches `metric`, if any."""
    names = [rule.trigger] if rule.paired else [rule.metric]
    for name in names:
        if signals.is_family(name) and metric in signals.members(name):
            return name
    return None


def _compile(
    rule: Rule, signal: signals.Signal | None
) -> tuple[Check, Scan | None, Callable[[list[float]], bool] | None]:
    """A rule's check, batch scan and quiet test, on `signal` when it watches a family: the
    member's values converted to the family's scale on the way in, the verdict's value and
    threshold converted back to the member's units on the way out."""
    if signal is None:
        return compile_rule(rule), compile_scan(rule), quiet_check(rule)
    member = signal.metric
    if rule.paired and member in signals.members(rule.trigger):
        rule = rule.with_changes(params={**rule.params, "trigger_metric": member})
    check, scan, quiet = compile_rule(rule), compile_scan(rule), quiet_check(rule)
    if signal.conversion == "same":
        return check, scan, quiet
    to_scale = signal.to_scale

    dimensioned = member + "{"

    def converted_check(st: dict[str, Any], value: float, metric: str, step: int) -> Verdict:
        if metric != member and not metric.startswith(dimensioned):
            return check(st, value, metric, step)
        verdict = check(st, to_scale(value), metric, step)
        return Verdict(verdict.breach, value, signal.from_scale(verdict.threshold, value))

    converted_scan: Scan | None = None
    if scan is not None:
        inner = scan

        def converted_scan(
            st: dict[str, Any], metric: str, steps: list[int], values: list[float]
        ) -> bool:
            if metric == member or metric.startswith(dimensioned):
                values = [to_scale(v) for v in values]
            return inner(st, metric, steps, values)

    converted_quiet = None
    if quiet is not None:
        test = quiet

        def converted_quiet(values: list[float]) -> bool:
            return test([to_scale(v) for v in values])

    return converted_check, converted_scan, converted_quiet
