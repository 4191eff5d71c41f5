"""The stateful detectors behind the spike, sustained and precursor rules: pure, incremental,
with JSON-able state.

Every detector runs over a run of values on local variables and returns the indices that
breached, the value the last one was judged by (the value itself, or the statistic a sustained
rule compares) and the threshold it was compared to, in the metric's own units.

**Spaces.** A rule says which space it works in (`space`: "linear", the default, or "log").
vllm-kl (k3) and the other mismatch metrics are positive and their noise is multiplicative and
heavy-tailed: a healthy run wanders by factors of 2–5 between steps. In linear space a median/MAD
z-score reads an ordinary upper-tail value as a spike; in log space the same noise is symmetric
and of one width whatever the run's level, so one z fits runs at 1e-5 and at 1e-2 alike. The
absolute `floor` stays in the metric's units either way: a value must exceed the trailing median
by at least `floor`, so a flat near-zero series never fires on rounding noise. In log space a
value ≤ 0 counts as `LOG_FLOOR`.

**Total.** For parameters within their ranges (`server.domain.rule_params`) a detector answers
every value — NaN, ±Inf, 0, negatives, the largest and the smallest floats — without raising: a
bound too large for a float is +Inf (nothing breaches it), a median of two huge values does not
overflow, a spread too wide for a float is the largest one, and an average that would overflow
stays within the values it averages.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from typing import Any

Params = Mapping[str, Any]
Core = Callable[[dict[str, Any], list[float], bool], tuple[list[int], float, float | None]]
"""(state, values, stop) -> (indices that breached, value judged last, its threshold). With
`stop`, the run ends at the first breach (a batch that may breach is then replayed value by
value on an untouched copy of the state)."""

SPACES = ("linear", "log")
LOG_FLOOR = 1e-30
MAD_TO_SIGMA = 1.4826  # the MAD of a normal distribution is 0.6745 σ
MIN_SCALE = 1e-12  # a constant history: any rise above the floor is a breach
MAX_FLOAT = sys.float_info.max

_isfinite = math.isfinite
_log = math.log


def _exp(x: float) -> float:
    """e**x, +Inf where that is too large for a float (a bound nothing can pass)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def space(p: Params) -> str:
    """The space a rule works in; refuses anything else, naming the parameter."""
    found = str(p.get("space", "linear"))
    if found not in SPACES:
        raise ValueError(f"space must be one of {', '.join(SPACES)}, not {found!r}")
    return found


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return 0.5 * ordered[mid - 1] + 0.5 * ordered[mid]  # halves first: two huge values fit


def _scale(history: list[float], med: float) -> float:
    """The robust standard deviation of a history: 1.4826 × its median absolute deviation, at
    least `MIN_SCALE` and at most the largest float (z × it is then never NaN)."""
    return min(max(MAD_TO_SIGMA * _median([abs(v - med) for v in history]), MIN_SCALE), MAX_FLOAT)


def spike(p: Params) -> Core:
    """A value far above the trailing median of the last `window` values: a robust z-score
    (median/MAD) above `z`, in the rule's space, and at least `floor` above the median. With
    `relative_below`, a value below that fraction of the trailing median (a collapse) instead.

    The median of the window is refreshed every `refresh` values (a tenth of the window, at
    least 5) rather than on every value: over a tenth of its window it barely moves, and this
    keeps evaluation cheap on the ingest path. The
    MAD is only computed when a value rises above median + floor (below that nothing can
    breach), so a value that cannot breach reports median + floor as its threshold. A breaching
    value does not join the history: a spike does not become the new normal."""
    window = int(p.get("window", 50))
    min_history = int(p.get("min_history", 10))
    refresh = int(p.get("refresh", max(5, window // 10)))
    below = p.get("relative_below")
    factor = float(below) if below else None
    z = float(p.get("z", 6.0))
    floor = float(p.get("floor", 0.0))
    log = space(p) == "log"

    def run(
        st: dict[str, Any], values: list[float], stop: bool
    ) -> tuple[list[int], float, float | None]:
        history: list[float] | None = st.get("history")
        if history is None:
            history = st["history"] = []
        med, bound, age = st.get("median"), st.get("bound"), st.get("age", 0)
        base = None if med is None else (_exp(med) if log else med)  # the median, in units
        breaches: list[int] = []
        threshold = None
        for i, value in enumerate(values):
            threshold = None
            if not _isfinite(value):
                continue
            if len(history) >= min_history:
                if med is None or base is None or age >= refresh:
                    med, bound, age = _median(history), None, 0
                    base = _exp(med) if log else med
                if factor is not None:
                    threshold = factor * base
                    breach = value < threshold
                else:
                    threshold = base + floor  # the bound is never below this: no MAD needed
                    if value > threshold:
                        if bound is None:
                            top = med + z * _scale(history, med)
                            bound = max(_exp(top) if log else top, threshold)
                        threshold = bound
                    breach = value > threshold
                if breach:
                    breaches.append(i)
                    if stop:
                        break
                    continue
            history.append(_log(value if value > LOG_FLOOR else LOG_FLOOR) if log else value)
            if len(history) > window:
                del history[:-window]
            age += 1
        st["median"], st["bound"], st["age"] = med, bound, age
        return breaches, values[-1] if values else math.nan, threshold

    return run


def sustained(p: Params) -> Core:
    """A rise that lasts, in the rule's space.

    Linear space: a short EWMA (`short` values) above `ratio` × a long one (`long` values), past
    `warmup` values and above `floor` — for small counts such as lag.

    Log space: the median of the last `short` values against the median and MAD of the `long`
    values before them, as a robust z-score above `z` (and at least `ratio` × and `floor` above
    the trailing median). The median of several steps shrugs off isolated one-step blips that a
    spike rule sees, and its noise is a fraction of one value's, so a slow rise is seen long
    before any single value stands out. While it breaches, the trailing window is frozen: a rise
    does not become the new normal."""
    if space(p) == "log":
        return _sustained_log(p)
    return _sustained_ewma(p)


def _sustained_ewma(p: Params) -> Core:
    a_short = 2 / (float(p.get("short", 5)) + 1)
    a_long = 2 / (float(p.get("long", 50)) + 1)
    ratio = float(p.get("ratio", 2.0))
    warmup = int(p.get("warmup", 20))
    floor = float(p.get("floor", 0.0))

    def run(
        st: dict[str, Any], values: list[float], stop: bool
    ) -> tuple[list[int], float, float | None]:
        n, short, long = st.get("n", 0), st.get("short", 0.0), st.get("long", 0.0)
        breaches: list[int] = []
        out: tuple[float, float | None] = (values[-1] if values else math.nan, None)
        for i, value in enumerate(values):
            if not _isfinite(value):
                out = (value, None)
                continue
            n += 1
            if n == 1:
                short = long = value
            else:
                step_short = short + a_short * (value - short)
                step_long = long + a_long * (value - long)
                if not (_isfinite(step_short) and _isfinite(step_long)):  # ±1e308 overflowed
                    step_short = _average(short, value, a_short)
                    step_long = _average(long, value, a_long)
                short, long = step_short, step_long
            out = (short, long * ratio)
            if n >= warmup and short > floor and long > 0 and short > ratio * long:
                breaches.append(i)
                if stop:
                    break
        if n:
            st.update(n=n, short=short, long=long)
        return breaches, *out

    return run


def _average(old: float, value: float, weight: float) -> float:
    """An EWMA step that cannot overflow: a weighted average stays between its two finite
    values (a rounding past the largest float is held at it)."""
    mixed = (1 - weight) * old + weight * value if _isfinite(old) else value
    return max(-MAX_FLOAT, min(MAX_FLOAT, mixed))


def _sustained_log(p: Params) -> Core:
    short = int(p.get("short", 7))
    long = int(p.get("long", 100))
    warmup = int(p.get("warmup", p.get("min_history", 30)))
    refresh = int(p.get("refresh", max(5, long // 10)))
    z = float(p.get("z", 3.0))
    ratio = float(p.get("ratio", 1.0))
    floor = float(p.get("floor", 0.0))
    log_ratio = _log(ratio) if ratio > 0 else -math.inf
    if short < 1 or long < 1 or warmup < 1:
        raise ValueError("short, long and warmup must be at least 1")

    def run(
        st: dict[str, Any], values: list[float], stop: bool
    ) -> tuple[list[int], float, float | None]:
        recent: list[float] = st.setdefault("recent", [])
        history: list[float] = st.setdefault("history", [])
        med, top, age = st.get("median"), st.get("top"), st.get("age", 0)
        breached = bool(st.get("breached"))
        breaches: list[int] = []
        value_out, threshold = (values[-1] if values else math.nan), None
        for i, value in enumerate(values):
            if not _isfinite(value):
                continue
            recent.append(_log(value if value > LOG_FLOOR else LOG_FLOOR))
            if len(recent) > short:
                old = recent.pop(0)
                if not breached:
                    history.append(old)
                    if len(history) > long:
                        del history[:-long]
                    age += 1
            breached = False
            value_out, threshold = value, None
            if len(recent) < short or len(history) < warmup:
                continue
            if med is None or top is None or age >= refresh:
                med, age = _median(history), 0
                top = max(med + z * _scale(history, med), med + log_ratio)
            stat = _median(recent)
            base = _exp(med)
            bound = max(_exp(top), base + floor)
            value_out, threshold = _exp(stat), bound
            if value_out > bound:
                breached = True
                breaches.append(i)
                if stop:
                    break
        st.update(median=med, top=top, age=age, breached=breached)
        return breaches, value_out, threshold

    return run
