"""Rule kinds as pure evaluators over one series, with JSON-able incremental state.

Each evaluator sees one value at a time (no history re-scan) and answers whether that value
breaches the rule, with the observed value and the threshold it was compared to.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from server.alarms.evaluating import detectors
from server.domain import signals
from server.domain.alarms import DEFAULT_TRIGGER, Rule

Params = Mapping[str, Any]


class Verdict(NamedTuple):
    """A tuple, not a dataclass: one is made per evaluated value on the ingest path."""

    breach: bool
    value: float
    threshold: float | None


Check = Callable[[dict[str, Any], float, str, int], Verdict]
"""A rule made ready to evaluate: (state, value, metric, step) -> Verdict. Parameters are read
once when the rule is compiled, not once per value."""

_isfinite = math.isfinite


def _threshold_breach(p: Params) -> Callable[[float], bool]:
    """Whether one value breaches a threshold rule; non-finite values never do (the
    non-finite rule watches those)."""
    limit = float(p["threshold"])
    absolute = bool(p.get("abs"))
    if p.get("direction", "above") == "above":
        return lambda v: limit < (abs(v) if absolute else v) < math.inf
    return lambda v: -math.inf < (abs(v) if absolute else v) < limit


def threshold(p: Params) -> Check:
    limit = float(p["threshold"])
    breach = _threshold_breach(p)

    def check(st: dict[str, Any], value: float, *_: Any) -> Verdict:
        return Verdict(breach(value), value, limit)

    return check


Scan = Callable[[dict[str, Any], str, list[int], list[float]], bool]
"""The batch form of a stateful rule: (state, metric, steps, values) -> True when every value was
absorbed without a breach (the state then is what checking them one by one leaves), False as
soon as one may breach — the caller then replays the batch value by value on an untouched copy.
"""


def _check(core: detectors.Core) -> Check:
    def check(st: dict[str, Any], value: float, *_: Any) -> Verdict:
        breaches, judged, threshold = core(st, [value], False)
        return Verdict(bool(breaches), judged, threshold)

    return check


def _scan(core: detectors.Core) -> Scan:
    return lambda st, metric, steps, values: not core(st, values, True)[0]


def spike(p: Params) -> Check:
    """A value far above its trailing median (see `detectors.spike`)."""
    return _check(detectors.spike(p))


def spike_scan(p: Params) -> Scan:
    return _scan(detectors.spike(p))


def sustained(p: Params) -> Check:
    """A rise that lasts (see `detectors.sustained`)."""
    return _check(detectors.sustained(p))


def sustained_scan(p: Params) -> Scan:
    return _scan(detectors.sustained(p))


def nonfinite(p: Params) -> Check:
    def check(st: dict[str, Any], value: float, *_: Any) -> Verdict:
        return Verdict(not _isfinite(value), value, None)

    return check


def _mark_trigger(
    st: dict[str, Any], breaches: list[int], count: int, steps: list[int], need: int
) -> None:
    """Advance the run of consecutive trigger breaches over `count` values; the step at which a
    run reaches `need` values becomes the trigger step."""
    run = st.get("trigger_run", 0)
    last = -1
    for i in breaches:
        run = run + 1 if i == last + 1 else 1
        last = i
        if run >= need:
            st["trigger_step"] = steps[i]
    st["trigger_run"] = run if last == count - 1 else 0


def precursor(p: Params) -> Check:
    """A vllm-kl spike followed within `within_steps` by a spike of a follow metric (grad_norm,
    entropy): the collapse the write-ups saw coming. One state holds a spike detector per metric.
    The trigger needs `trigger_for` consecutive breaching values (one by default): an isolated
    one-step blip of k3 is benign and announces nothing."""
    detector = detectors.spike(p)
    trigger = str(p.get("trigger_metric", DEFAULT_TRIGGER))
    triggers = frozenset(signals.members(trigger))  # a family: any of its members
    within = int(p.get("within_steps", 30))
    need = int(p.get("trigger_for", 1))

    def check(st: dict[str, Any], value: float, metric: str, step: int) -> Verdict:
        states = st.setdefault("detectors", {})
        breaches, _, threshold = detector(states.setdefault(metric, {}), [value], False)
        if metric in triggers:
            _mark_trigger(st, breaches, 1, [step], need)
            return Verdict(False, value, threshold)
        since = st.get("trigger_step")
        near = since is not None and 0 <= step - since <= within
        follow_spike = bool(breaches) or not _isfinite(value)
        return Verdict(near and follow_spike, value, threshold)

    return check


def precursor_scan(p: Params) -> Scan:
    """Trigger spikes are absorbed (they only mark a step); any follow-metric spike or non-finite
    value hands the batch back for the exact, step-interleaved replay."""
    detector = detectors.spike(p)
    trigger = str(p.get("trigger_metric", DEFAULT_TRIGGER))
    triggers = frozenset(signals.members(trigger))  # a family: any of its members
    need = int(p.get("trigger_for", 1))

    def scan(st: dict[str, Any], metric: str, steps: list[int], values: list[float]) -> bool:
        state = st.setdefault("detectors", {}).setdefault(metric, {})
        if metric in triggers:
            breaches, _, _ = detector(state, values, False)
            _mark_trigger(st, breaches, len(values), steps, need)
            return True
        return _isfinite(sum(values)) and not detector(state, values, True)[0]

    return scan


_RISE_KEYS = ("short", "long", "warmup", "z", "floor", "ratio", "refresh")
_FALL_KEYS = ("window", "min_history")


def diverging(p: Params) -> Check:
    """A follow metric falling while the trigger metric rises.

    The trigger's rise is the sustained rule's in log space (`short`, `long`, `warmup`, `z`,
    `floor`); the follow metric's fall is a value below `relative_below` of its trailing median
    over `window` values (the spike rule's collapse test). The rule breaches on a falling value
    at most `within_steps` after a rising step; a fall that began first counts while it lasts,
    since a value below the trailing median never joins it. A correction that masks less and
    less while the gap it corrects widens is going blind. One state holds a detector per
    metric."""
    rise = detectors.sustained({k: p[k] for k in _RISE_KEYS if k in p} | {"space": "log"})
    fall = detectors.spike(
        {k: p[k] for k in _FALL_KEYS if k in p}
        | {"relative_below": float(p.get("relative_below", 0.5)), "space": "linear"}
    )
    trigger = str(p.get("trigger_metric", DEFAULT_TRIGGER))
    triggers = frozenset(signals.members(trigger))
    within = int(p.get("within_steps", 50))

    def check(st: dict[str, Any], value: float, metric: str, step: int) -> Verdict:
        states = st.setdefault("detectors", {})
        if metric in triggers:
            breaches, judged, threshold = rise(states.setdefault(metric, {}), [value], False)
            if breaches:
                st["trigger_step"] = step
            return Verdict(False, judged, threshold)
        breaches, _, threshold = fall(states.setdefault(metric, {}), [value], False)
        if breaches:
            st["fall_step"] = step
        rose = st.get("trigger_step")
        near = rose is not None and 0 <= step - rose <= within
        return Verdict(bool(breaches) and near, value, threshold)

    return check


def quiet_check(rule: Rule) -> Callable[[list[float]], bool] | None:
    """For the stateless kinds (threshold, non-finite): a test over a batch of values that none
    of them breaches, so the batch can be skipped whole while the alert is settled. None for the
    kinds that keep per-value state and must see every value."""
    if rule.kind == "nonfinite":
        return lambda values: _isfinite(sum(values))  # a NaN or ±Inf makes the sum so
    if rule.kind != "threshold":
        return None
    breach = _threshold_breach(rule.params)
    return lambda values: not any(map(breach, values))


COMPILERS: dict[str, Callable[[Mapping[str, Any]], Check]] = {
    "threshold": threshold,
    "spike": spike,
    "sustained": sustained,
    "nonfinite": nonfinite,
    "precursor": precursor,
    "diverging": diverging,
}


SCANS: dict[str, Callable[[Mapping[str, Any]], Scan]] = {
    "spike": spike_scan,
    "sustained": sustained_scan,
    "precursor": precursor_scan,
}


def compile_rule(rule: Rule) -> Check:
    return COMPILERS[rule.kind](rule.params)


def compile_scan(rule: Rule) -> Scan | None:
    """The batch form of a stateful rule; None for the stateless kinds (see `quiet_check`)."""
    make = SCANS.get(rule.kind)
    return make(rule.params) if make is not None else None


def evaluate(rule: Rule, state: dict[str, Any], value: float, metric: str, step: int) -> Verdict:
    """One value through a rule (tests and one-off checks; the service keeps compiled rules)."""
    return compile_rule(rule)(state, value, metric, step)
