"""Rule kinds as pure evaluators over one series, with JSON-able incremental state.

Each evaluator sees one value at a time (no history re-scan) and answers whether that value
breaches the rule, with the observed value and the threshold it was compared to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

KINDS = ("threshold", "spike", "sustained", "nonfinite", "stalled", "precursor")


@dataclass(frozen=True)
class Rule:
    id: str
    project: str
    name: str
    kind: str
    metric: str = "*"
    source: str | None = None
    run_id: str | None = None
    label: str | None = None
    gpu: str | None = None
    severity: str = "warning"
    params: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True

    def matches(
        self,
        *,
        project: str,
        run_id: str,
        labels: dict[str, str],
        source: str,
        gpu: str | None,
        metric: str,
    ) -> bool:
        if not self.enabled or self.project != project:
            return False
        if self.run_id and self.run_id != run_id:
            return False
        if self.source and self.source != source:
            return False
        if self.gpu and self.gpu != (gpu or ""):
            return False
        if self.label:
            key, _, value = self.label.partition("=")
            if key not in labels or (value and labels[key] != value):
                return False
        metrics = self.params.get("metrics")
        if self.kind == "precursor":
            return metric in (
                self.params.get("trigger_metric", "k3_kl"),
                *self.params.get("follow", ()),
            )
        if metrics:
            return metric in metrics
        return self.metric in ("*", metric)


@dataclass(frozen=True)
class Verdict:
    breach: bool
    value: float
    threshold: float | None


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def threshold(p: dict[str, Any], st: dict[str, Any], value: float, *_: Any) -> Verdict:
    limit = float(p["threshold"])
    observed = abs(value) if p.get("abs") else value
    if not math.isfinite(observed):
        return Verdict(False, value, limit)
    above = p.get("direction", "above") == "above"
    return Verdict(observed > limit if above else observed < limit, value, limit)


def spike(p: dict[str, Any], st: dict[str, Any], value: float, *_: Any) -> Verdict:
    """Robust z-score against the trailing median/MAD of `window` values, with an absolute floor
    (value − median must exceed it) so a flat series does not fire on noise.

    The median and MAD of the window are refreshed every `refresh` values rather than on every
    value: over 50 steps they barely move, and this keeps evaluation cheap on the ingest path."""
    window = int(p.get("window", 50))
    history: list[float] = st.setdefault("history", [])
    verdict = Verdict(False, value, None)
    if math.isfinite(value):
        if len(history) >= int(p.get("min_history", 10)):
            if "bound" not in st or st.get("age", 0) >= int(p.get("refresh", 5)):
                st["bound"] = _bound(p, history)
                st["age"] = 0
            bound = st["bound"]
            below = bool(p.get("relative_below"))
            verdict = Verdict(value < bound if below else value > bound, value, bound)
        if not verdict.breach:
            history.append(value)  # a spike is not allowed to become the new normal at once
            del history[:-window]
            st["age"] = st.get("age", 0) + 1
    return verdict


def _bound(p: dict[str, Any], history: list[float]) -> float:
    med = _median(history)
    if p.get("relative_below"):  # a collapse: far below the trailing median
        return float(p["relative_below"]) * med
    mad = _median([abs(v - med) for v in history])
    limit = med + float(p.get("z", 6.0)) * max(1.4826 * mad, 1e-12)
    return max(limit, med + float(p.get("floor", 0.0)))


def sustained(p: dict[str, Any], st: dict[str, Any], value: float, *_: Any) -> Verdict:
    """Short EWMA over long EWMA above `ratio` (after `warmup` values, above `floor`)."""
    if not math.isfinite(value):
        return Verdict(False, value, None)
    a_short = 2 / (float(p.get("short", 5)) + 1)
    a_long = 2 / (float(p.get("long", 50)) + 1)
    n = st.get("n", 0) + 1
    short = value if n == 1 else st["short"] + a_short * (value - st["short"])
    long = value if n == 1 else st["long"] + a_long * (value - st["long"])
    st.update(n=n, short=short, long=long)
    ratio = float(p.get("ratio", 2.0))
    if n < int(p.get("warmup", 20)) or short <= float(p.get("floor", 0.0)) or long <= 0:
        return Verdict(False, short, long * ratio)
    return Verdict(short > ratio * long, short, long * ratio)


def nonfinite(p: dict[str, Any], st: dict[str, Any], value: float, *_: Any) -> Verdict:
    return Verdict(not math.isfinite(value), value, None)


def precursor(
    p: dict[str, Any], st: dict[str, Any], value: float, metric: str, step: int
) -> Verdict:
    """A vllm-kl spike followed within `within_steps` by a spike of a follow metric (grad_norm,
    entropy): the collapse the write-ups saw coming. One state holds a spike detector per metric."""
    detectors = st.setdefault("detectors", {})
    verdict = spike(p, detectors.setdefault(metric, {}), value)
    trigger = p.get("trigger_metric", "k3_kl")
    if metric == trigger:
        if verdict.breach:
            st["trigger_step"] = step
        return Verdict(False, value, verdict.threshold)
    since = st.get("trigger_step")
    within = since is not None and 0 <= step - since <= int(p.get("within_steps", 30))
    follow_spike = verdict.breach or not math.isfinite(value)
    return Verdict(within and follow_spike, value, verdict.threshold)


EVALUATORS = {
    "threshold": threshold,
    "spike": spike,
    "sustained": sustained,
    "nonfinite": nonfinite,
    "precursor": precursor,
}


def evaluate(rule: Rule, state: dict[str, Any], value: float, metric: str, step: int) -> Verdict:
    return EVALUATORS[rule.kind](rule.params, state, value, metric, step)
