"""Rule kinds as pure evaluators over one series, with JSON-able incremental state.

Each evaluator sees one value at a time (no history re-scan) and answers whether that value
breaches the rule, with the observed value and the threshold it was compared to.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

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


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


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


def _spike_core(
    p: Params,
) -> Callable[[dict[str, Any], list[float], bool], tuple[list[int], float | None]]:
    """The spike detector over a run of values, on local variables: returns the indices that
    breached and the threshold the last value was compared to. With `stop`, it ends after the
    first breach."""
    window = int(p.get("window", 50))
    min_history = int(p.get("min_history", 10))
    refresh = int(p.get("refresh", 5))
    below = p.get("relative_below")
    factor = float(below) if below else None  # a collapse: far below the trailing median
    z = float(p.get("z", 6.0))
    floor = float(p.get("floor", 0.0))

    def run(st: dict[str, Any], values: list[float], stop: bool) -> tuple[list[int], float | None]:
        history: list[float] | None = st.get("history")
        if history is None:
            history = st["history"] = []
        med, bound, age = st.get("median"), st.get("bound"), st.get("age", 0)
        breaches: list[int] = []
        threshold = None
        for i, value in enumerate(values):
            threshold = None
            if not _isfinite(value):
                continue
            if len(history) >= min_history:
                if med is None or age >= refresh:
                    med, bound, age = _median(history), None, 0  # MAD: when a value could breach
                if factor is not None:
                    threshold = factor * med
                    breach = value < threshold
                else:
                    threshold = med + floor  # the bound is never below this: no MAD needed
                    if value > threshold:
                        if bound is None:
                            mad = _median([abs(v - med) for v in history])
                            bound = max(med + z * max(1.4826 * mad, 1e-12), threshold)
                        threshold = bound
                    breach = value > threshold
                if breach:  # a spike does not become the new normal
                    breaches.append(i)
                    if stop:
                        break
                    continue
            history.append(value)
            if len(history) > window:
                del history[:-window]
            age += 1
        st["median"], st["bound"], st["age"] = med, bound, age
        return breaches, threshold

    return run


def spike(p: Params) -> Check:
    """Robust z-score against the trailing median/MAD of `window` values, with an absolute floor
    (value − median must exceed it) so a flat series does not fire on noise.

    The median and MAD of the window are refreshed every `refresh` values rather than on every
    value: over 50 steps they barely move, and this keeps evaluation cheap on the ingest path.
    The MAD is only computed when a value rises above median + floor (below that nothing can
    breach), so a value that cannot breach reports median + floor as its threshold."""
    run = _spike_core(p)

    def check(st: dict[str, Any], value: float, *_: Any) -> Verdict:
        breaches, threshold = run(st, [value], False)
        return Verdict(bool(breaches), value, threshold)

    return check


def spike_scan(p: Params) -> Scan:
    run = _spike_core(p)
    return lambda st, metric, steps, values: not run(st, values, True)[0]


def _sustained_core(
    p: Params,
) -> Callable[[dict[str, Any], list[float], bool], tuple[bool, float, float | None]]:
    a_short = 2 / (float(p.get("short", 5)) + 1)
    a_long = 2 / (float(p.get("long", 50)) + 1)
    ratio = float(p.get("ratio", 2.0))
    warmup = int(p.get("warmup", 20))
    floor = float(p.get("floor", 0.0))

    def run(
        st: dict[str, Any], values: list[float], stop: bool
    ) -> tuple[bool, float, float | None]:
        """Whether any value breached; the last short EWMA and threshold."""
        n, short, long = st.get("n", 0), st.get("short", 0.0), st.get("long", 0.0)
        breached = False
        out: tuple[float, float | None] = (values[-1], None)
        for value in values:
            if not _isfinite(value):
                out = (value, None)
                continue
            n += 1
            short = value if n == 1 else short + a_short * (value - short)
            long = value if n == 1 else long + a_long * (value - long)
            out = (short, long * ratio)
            if n >= warmup and short > floor and long > 0 and short > ratio * long:
                breached = True
                if stop:
                    break
        if n:
            st.update(n=n, short=short, long=long)
        return breached, *out

    return run


def sustained(p: Params) -> Check:
    """Short EWMA over long EWMA above `ratio` (after `warmup` values, above `floor`)."""
    run = _sustained_core(p)

    def check(st: dict[str, Any], value: float, *_: Any) -> Verdict:
        breached, short, threshold = run(st, [value], False)
        return Verdict(breached, short, threshold)

    return check


def sustained_scan(p: Params) -> Scan:
    run = _sustained_core(p)
    return lambda st, metric, steps, values: not run(st, values, True)[0]


def nonfinite(p: Params) -> Check:
    def check(st: dict[str, Any], value: float, *_: Any) -> Verdict:
        return Verdict(not _isfinite(value), value, None)

    return check


def precursor(p: Params) -> Check:
    """A vllm-kl spike followed within `within_steps` by a spike of a follow metric (grad_norm,
    entropy): the collapse the write-ups saw coming. One state holds a spike detector per metric."""
    detector = _spike_core(p)
    trigger = str(p.get("trigger_metric", DEFAULT_TRIGGER))
    within = int(p.get("within_steps", 30))

    def check(st: dict[str, Any], value: float, metric: str, step: int) -> Verdict:
        detectors = st.setdefault("detectors", {})
        breaches, threshold = detector(detectors.setdefault(metric, {}), [value], False)
        if metric == trigger:
            if breaches:
                st["trigger_step"] = step
            return Verdict(False, value, threshold)
        since = st.get("trigger_step")
        near = since is not None and 0 <= step - since <= within
        follow_spike = bool(breaches) or not _isfinite(value)
        return Verdict(near and follow_spike, value, threshold)

    return check


def precursor_scan(p: Params) -> Scan:
    """Trigger spikes are absorbed (they only mark a step); any follow-metric spike or non-finite
    value hands the batch back for the exact, step-interleaved replay."""
    detector = _spike_core(p)
    trigger = str(p.get("trigger_metric", DEFAULT_TRIGGER))

    def scan(st: dict[str, Any], metric: str, steps: list[int], values: list[float]) -> bool:
        state = st.setdefault("detectors", {}).setdefault(metric, {})
        if metric == trigger:
            breaches, _ = detector(state, values, False)
            if breaches:
                st["trigger_step"] = steps[breaches[-1]]
            return True
        return _isfinite(sum(values)) and not detector(state, values, True)[0]

    return scan


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
