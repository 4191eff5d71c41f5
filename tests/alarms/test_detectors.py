"""The spike and sustained detectors in log space, against answers computed independently with
NumPy, and the behaviours the default pack relies on: quiet on log-normal noise, loud on a rise,
deaf to isolated blips, and a rise that does not become the new normal."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from server.alarms.configuring.config import check_rule
from server.alarms.evaluating.rules import compile_rule
from server.domain.alarms import Rule
from server.errors import Rejected


def _rule(kind: str, **params: Any) -> Rule:
    return Rule(id="r", project="p", name="n", kind=kind, metric="k3_kl", params=params)


def _verdicts(rule: Rule, values: list[float]) -> list[Any]:
    check, state = compile_rule(rule), {}
    return [check(state, v, "k3_kl", step) for step, v in enumerate(values)]


def _lognormal(n: int, sigma: float, seed: int, level: float = 1e-3) -> list[float]:
    rng = np.random.default_rng(seed)
    return (level * np.exp(sigma * rng.standard_normal(n))).tolist()


def test_log_spike_threshold_is_the_median_plus_z_mads_of_the_logs() -> None:
    history = _lognormal(40, 0.5, 1)
    rule = _rule("spike", space="log", window=40, z=4.0, floor=1e-6, min_history=40, refresh=1)
    logs = np.log(history)
    med = float(np.median(logs))
    mad = float(np.median(np.abs(logs - med)))
    bound = max(math.exp(med + 4.0 * 1.4826 * mad), math.exp(med) + 1e-6)
    below = _verdicts(rule, [*history, bound * 0.999])[-1]
    above = _verdicts(rule, [*history, bound * 1.001])[-1]
    assert below.threshold == pytest.approx(bound, rel=1e-9) and not below.breach
    assert above.threshold == pytest.approx(bound, rel=1e-9) and above.breach


def test_log_spike_is_quiet_on_lognormal_noise_that_a_linear_spike_flags() -> None:
    healthy = _lognormal(10_000, 0.6, 2)
    params = {"window": 100, "z": 5.0, "floor": 2e-5, "min_history": 30}
    in_log = sum(v.breach for v in _verdicts(_rule("spike", space="log", **params), healthy))
    in_linear = sum(v.breach for v in _verdicts(_rule("spike", **params), healthy))
    assert in_log == 0
    assert in_linear > 50  # the upper tail of log-normal noise, read as spikes


def test_log_spike_fires_on_a_20x_rise() -> None:
    values = _lognormal(300, 0.5, 3)
    rise = [v * 20 ** min(1.0, (i + 1) / 10) for i, v in enumerate(_lognormal(20, 0.5, 4))]
    verdicts = _verdicts(_rule("spike", space="log", window=100, z=5.0, min_history=30), values)
    assert not any(v.breach for v in verdicts)
    later = _verdicts(_rule("spike", space="log", window=100, z=5.0, min_history=30), values + rise)
    assert any(v.breach for v in later[300:])


def test_log_space_takes_zeros_without_failing_and_keeps_the_floor() -> None:
    rule = _rule("spike", space="log", floor=1e-4, min_history=10)
    verdicts = _verdicts(rule, [0.0] * 50 + [5e-5, 2e-4])
    assert [v.breach for v in verdicts[-2:]] == [False, True]


def test_rise_is_the_median_of_the_short_window_against_the_frozen_baseline() -> None:
    rule = _rule("sustained", space="log", short=7, long=100, warmup=30, z=2.5, refresh=1)
    base = _lognormal(150, 0.5, 5)
    shifted = [v * 10 for v in _lognormal(200, 0.5, 6)]
    verdicts = _verdicts(rule, base + shifted)
    first = next(i for i, v in enumerate(verdicts) if v.breach)
    assert 150 + 3 <= first <= 150 + 7  # the short median needs 4 of 7 values shifted
    window = np.log((base + shifted)[first - 6 : first + 1])
    assert verdicts[first].value == pytest.approx(math.exp(float(np.median(window))))
    baseline = np.log((base + shifted)[first - 106 : first - 6])
    med = float(np.median(baseline))
    scale = 1.4826 * float(np.median(np.abs(baseline - med)))
    assert verdicts[first].threshold == pytest.approx(math.exp(med + 2.5 * scale))
    # The baseline froze at the shift: the rise is still a rise 200 steps later.
    assert all(v.breach for v in verdicts[first:])


def test_rise_is_deaf_to_isolated_blips() -> None:
    rule = _rule("sustained", space="log", short=7, long=100, warmup=30, z=2.5)
    values = _lognormal(400, 0.3, 7)
    for i in range(200, 260, 4):  # a burst of blips ×8, four steps apart
        values[i] *= 8
    assert not any(v.breach for v in _verdicts(rule, values))
    spike = _rule("spike", space="log", window=100, z=5.0, min_history=30)
    assert sum(v.breach for v in _verdicts(spike, values)) >= 12  # each blip is a real spike


def test_linear_sustained_keeps_its_ewma_ratio() -> None:
    rule = _rule("sustained", short=5, long=50, ratio=2.0, warmup=10)
    verdicts = _verdicts(rule, [1.0] * 30 + [10.0] * 5)
    assert not any(v.breach for v in verdicts[:30]) and verdicts[-1].breach
    short = 1.0
    for _ in range(5):
        short += (2 / 6) * (10.0 - short)
    assert verdicts[-1].value == pytest.approx(short)


def test_an_unknown_space_is_refused_naming_the_parameter() -> None:
    with pytest.raises(Rejected, match="params: space must be one of linear, log"):
        check_rule(_rule("spike", space="cubic"))


def test_precursor_trigger_needs_consecutive_breaches() -> None:
    rule = Rule(
        id="r",
        project="p",
        name="n",
        kind="precursor",
        metric="k3_kl",
        params={"space": "log", "trigger_for": 2, "follow": ["grad_norm"], "min_history": 30},
    )
    check = compile_rule(rule)

    def fired(k3: list[float]) -> bool:
        state: dict[str, Any] = {}
        grads = [1.0] * (len(k3) - 1) + [100.0]
        hits = []
        for step, (k, g) in enumerate(zip(k3, grads, strict=True)):
            check(state, k, "k3_kl", step)
            hits.append(check(state, g, "grad_norm", step).breach)
        return hits[-1]

    quiet = [1e-3] * 40
    assert not fired([*quiet, 0.1, 1e-3, 1e-3, 1e-3])  # one blip announces nothing
    assert fired([*quiet, 0.1, 0.1, 1e-3, 1e-3])


@pytest.mark.parametrize("seconds", [0, -5, "soon", True])
def test_no_data_s_must_be_a_positive_number_of_seconds(seconds: Any) -> None:
    with pytest.raises(Rejected, match=r"params\.no_data_s"):
        check_rule(_rule("threshold", threshold=1.0, no_data_s=seconds))


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("nonfinite", {"metrics": 5}),
        ("precursor", {"follow": [3]}),
        ("nonfinite", {"metrics": [""]}),
    ],
)
def test_watched_metrics_must_be_names(kind: str, params: dict[str, Any]) -> None:
    with pytest.raises(Rejected, match="must name metrics"):
        check_rule(_rule(kind, **params))


def test_a_log_sustained_rule_needs_windows_of_at_least_one_value() -> None:
    with pytest.raises(Rejected, match=r"params\.short: must be an integer between 1 and"):
        check_rule(_rule("sustained", space="log", short=0))
