"""Each rule kind on synthetic series with known answers, through the state machine."""

from __future__ import annotations

import math
import random
from typing import Any

from server.alarms.configuring.defaults import PACK
from server.alarms.evaluating.rules import evaluate
from server.alarms.evaluating.state import advance
from server.domain import signals
from server.domain.alarms import Rule


def rule(name: str) -> Rule:
    spec = next(s for s in PACK if s["name"] == name)
    return Rule(id=name, project="p", **spec)


def run_series(r: Rule, series: dict[str, list[float]], *, steps: int) -> list[tuple[str, int]]:
    """Feed step by step (all metrics of a step together); return (transition, step) events."""
    states: dict[str, dict[str, Any]] = {}
    events = []
    for step in range(steps):
        for metric, values in series.items():
            key = "run" if r.kind == "precursor" else metric
            st = states.setdefault(key, {})
            verdict = evaluate(r, st.setdefault("eval", {}), values[step], metric, step)
            if r.kind == "precursor" and metric in signals.members(r.trigger):
                continue
            tr = advance(
                st,
                verdict.breach,
                step=step,
                value=verdict.value,
                threshold=verdict.threshold,
                now=float(step),
                for_steps=int(r.params.get("for_steps", 1)),
                resolve_steps=3,
            )
            if tr:
                events.append((tr.kind, step))
    return events


def noisy(n: int, level: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + 0.2 * rng.gauss(0, 1)) for _ in range(n)]


def test_seed_pattern_spike_at_the_rise_and_precursor_at_the_explosion() -> None:
    k3 = noisy(400, 1e-3, 1)
    grad = noisy(400, 1.0, 2)
    for s in range(250, 400):
        k3[s] = 0.05
    for s in range(270, 400):
        grad[s] = 50.0
    spike_events = run_series(rule("vllm-kl spike"), {"k3_kl": k3}, steps=400)
    assert spike_events[0] == ("firing", 251)  # the second step in a row
    precursor = run_series(rule("collapse precursor"), {"k3_kl": k3, "grad_norm": grad}, steps=400)
    assert precursor[0] == ("firing", 270)
    assert rule("collapse precursor").severity == "critical"


def test_healthy_noisy_series_fires_nothing_over_10000_steps() -> None:
    k3 = noisy(10_000, 1e-3, 3)
    for name in ("vllm-kl spike", "vllm-kl rise", "vllm-kl high"):
        assert run_series(rule(name), {"k3_kl": k3}, steps=10_000) == [], name


def test_flat_zero_series_does_not_fire_on_noise() -> None:
    series = [0.0] * 100 + [1e-6] + [0.0] * 20
    assert run_series(rule("vllm-kl spike"), {"k3_kl": series}, steps=121) == []


def test_threshold_needs_consecutive_steps_and_resolves() -> None:
    values = [1e-3] * 10 + [0.2] * 2 + [1e-3] + [0.2] * 6 + [1e-3] * 5
    events = run_series(rule("vllm-kl high"), {"k3_kl": values}, steps=len(values))
    assert events == [("firing", 17), ("resolved", 21)]  # the fifth step above 0.02


def test_ratio_drift_fires_on_either_sign() -> None:
    r = rule("ratio drift")
    assert run_series(r, {"ratio_dev_1e4": [0.5] * 5 + [-300.0] * 5}, steps=10) == [("firing", 7)]


def test_entropy_collapse_against_its_trailing_median() -> None:
    entropy = [2.0] * 30 + [0.5] * 10
    assert run_series(rule("entropy collapse"), {"entropy": entropy}, steps=40)[0] == ("firing", 34)


def test_sustained_rise_of_lag() -> None:
    lag = [1.0] * 40 + [1.0 + 0.5 * i for i in range(40)]
    events = run_series(rule("lag growing"), {"lag": lag}, steps=80)
    assert events and events[0][0] == "firing"
    assert 40 < events[0][1] < 60


def test_nonfinite_fires_at_once() -> None:
    values = [1.0, 2.0, math.nan, 3.0, 4.0, 5.0, math.inf]
    events = run_series(rule("non-finite values"), {"grad_norm": values}, steps=len(values))
    assert events == [("firing", 2), ("resolved", 5), ("firing", 6)]


def test_rule_scopes() -> None:
    r = Rule(
        id="x",
        project="p",
        name="n",
        kind="threshold",
        metric="k3_kl",
        label="gpu=A100",
        source="trainer",
        params={"threshold": 1},
    )
    base = {"project": "p", "run_id": "r", "source": "trainer", "gpu": None, "metric": "k3_kl"}
    assert r.matches(labels={"gpu": "A100"}, **base)
    assert not r.matches(labels={"gpu": "H20"}, **base)
    assert not r.matches(labels={"gpu": "A100"}, **{**base, "source": "rollout"})
    assert not r.matches(labels={"gpu": "A100"}, **{**base, "project": "q"})
