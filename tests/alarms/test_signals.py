"""Mismatch signals: each series is watched through the strongest signal it logs, converted to
its family's scale, with value and threshold reported in the signal's own units."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.alarms.configuring.defaults import PACK
from server.alarms.evaluating.evaluation import Evaluator
from server.domain import signals
from server.domain.alarms import Fired, Rule
from server.domain.records import StoredRecord


def _pack(project: str = "p") -> list[Rule]:
    return [Rule(id=spec["name"], project=project, **spec) for spec in PACK]


def _record(step: int, metrics: dict[str, float], run: str = "r") -> StoredRecord:
    return StoredRecord(
        run_id=run,
        project="p",
        labels={},
        source="trainer",
        actor="a",
        step=step,
        time=1000.0 + step,
        gpu=None,
        weight_version=None,
        metrics=metrics,
    )


def _feed(steps: list[dict[str, float]], run: str = "r") -> list[Fired]:
    evaluator = Evaluator(_pack())
    fired: list[Fired] = []
    for step, metrics in enumerate(steps, start=1):
        work = evaluator.plan([_record(step, metrics, run)])
        fired.extend(evaluator.feed(work, now=1000.0 + step))
    return fired


def _firing(fired: list[Fired]) -> list[tuple[str, str, int]]:
    return [(f.rule.name, f.metric, f.subject.step) for f in fired if f.transition.kind == "firing"]


def test_every_member_converts_back_to_its_own_units() -> None:
    for signal in signals.SIGNALS:
        for value in (1e-4, 0.03, 0.5, 0.8, 1.3, 2.0, 250.0):
            if signal.conversion == "excess_square" and value < 1.0:
                continue  # exp|d| is never below 1: no value of the signal there
            back = signal.from_scale(signal.to_scale(value), value)
            assert back == pytest.approx(value), (signal.metric, value)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_conversions_never_raise(value: float) -> None:
    for signal in signals.SIGNALS:
        scaled = signal.to_scale(value)
        signal.from_scale(scaled, value)
        if not math.isfinite(value):
            assert scaled is value or math.isnan(scaled) == math.isnan(value)


def test_a_family_reads_the_strongest_member_a_series_logs() -> None:
    assert signals.strongest(signals.VLLM_KL, {"abs_logp_diff_mean", "k1_kl"}).metric == "k1_kl"
    assert signals.strongest(signals.VLLM_KL, {"abs_logp_diff_mean", "k3_kl"}).metric == "k3_kl"
    assert signals.strongest(signals.RATIO, {"ratio_mean@trl"}).metric == "ratio_mean@trl"
    assert signals.strongest(signals.VLLM_KL, {"entropy"}) is None
    assert signals.headline({"ratio_dev_1e4_seq", "k3_kl_seq"}).metric == "k3_kl_seq"


def test_max_type_metrics_are_never_members() -> None:
    names = {s.metric for s in signals.SIGNALS}
    assert not {"abs_logp_diff_max", "ratio_max", "k3_kl_max", "prob_diff_max"} & names


def test_a_trl_run_mismatched_from_its_first_step_warns_in_its_own_units() -> None:
    """TRL's names, a repetition penalty the trainer does not apply, no config to say so: the
    mean importance ratio sits near 0.05 from step 1 (the public run's level), the mean |d| is
    modest. Ratio drift fires at step 3 and says so in the ratio's units."""
    steps = [
        {"abs_logp_diff_mean": 0.028, "ratio_mean@trl": 0.05 + 0.01 * (s % 3), "entropy": 1.0}
        for s in range(12)
    ]
    fired = [f for f in _feed(steps) if f.transition.kind == "firing"]
    assert [(f.rule.name, f.metric, f.subject.step) for f in fired] == [
        ("ratio drift", "ratio_mean@trl", 3)
    ]
    transition = fired[0].transition
    assert transition.value == pytest.approx(0.07)  # step 3
    assert transition.threshold == pytest.approx(1 - 50 * signals.SEQ_RATIO_NOISE / 1e4)


def test_a_healthy_trl_run_raises_nothing() -> None:
    steps = [
        {
            "abs_logp_diff_mean": 0.0087 * (1 + 0.05 * math.sin(s)),
            "ratio_mean@trl": 1.0 + 0.015 * math.sin(1.3 * s),
            "entropy": 1.0 - 0.001 * s,
        }
        for s in range(150)
    ]
    assert _firing(_feed(steps)) == []


def test_a_large_mean_logp_difference_from_step_one_reads_as_vllm_kl_high() -> None:
    """The public TRL run's level: a mean |d| of 0.26 nats per token from the first step."""
    steps = [{"abs_logp_diff_mean": 0.26 + 0.01 * (s % 2)} for s in range(10)]
    fired = [f for f in _feed(steps) if f.transition.kind == "firing"]
    assert [(f.rule.name, f.metric, f.subject.step) for f in fired] == [
        ("vllm-kl high", "abs_logp_diff_mean", 5)
    ]
    threshold = fired[0].transition.threshold
    assert threshold == pytest.approx(math.sqrt(0.02 / signals.ABS_D_TO_K3))


def test_openrlhf_k1_far_below_zero_counts_by_its_magnitude() -> None:
    fired = _firing(_feed([{"k1_kl": -0.2} for _ in range(6)]))
    assert fired == [("vllm-kl high", "k1_kl", 5)]


def test_a_series_with_k3_is_not_judged_twice_through_weaker_members() -> None:
    steps = [{"k3_kl": 0.2, "abs_logp_diff_mean": 0.4, "k1_kl": 0.3} for _ in range(6)]
    assert _firing(_feed(steps)) == [("vllm-kl high", "k3_kl", 5)]


def test_a_stronger_member_arriving_later_takes_over() -> None:
    steps: list[dict[str, Any]] = [{"abs_logp_diff_mean": 0.01} for _ in range(3)]
    steps += [{"abs_logp_diff_mean": 0.01, "k3_kl": 0.2} for _ in range(6)]
    assert _firing(_feed(steps)) == [("vllm-kl high", "k3_kl", 8)]


def test_slime_sequence_level_names_are_watched() -> None:
    steps = [{"k3_kl_seq": 0.3, "ratio_dev_1e4_seq": 400.0} for _ in range(6)]
    assert sorted(_firing(_feed(steps))) == [
        ("ratio drift", "ratio_dev_1e4_seq", 3),
        ("vllm-kl high", "k3_kl_seq", 5),
    ]


def test_the_precursor_triggers_on_a_family_member() -> None:
    """A rise of the mean |d| followed by a grad_norm explosion: the critical precursor fires."""
    steps: list[dict[str, float]] = []
    for s in range(160):
        wiggle = 1 + 0.1 * math.sin(0.7 * s)
        d = 0.01 * wiggle if s < 100 else 0.2
        grad = 1.0 * wiggle if s < 110 else 100.0
        steps.append({"abs_logp_diff_mean": d, "grad_norm": grad})
    names = {name for name, _, _ in _firing(_feed(steps))}
    assert "collapse precursor" in names
    assert "vllm-kl spike" in names


def test_a_truncated_weight_mean_reads_below_one_divided_by_the_cap_shortfall() -> None:
    """min(r, 2) cuts the top of a healthy gap, so below 1 verl's mean reads the gap too: its
    deviation there counts a third (0.985 is −150 ×1e-4, −50 on the scale); above 1 it counts
    whole, as a plain token mean's does."""
    verl = signals.BY_METRIC["ratio_mean@verl"]
    assert verl.to_scale(0.985) == pytest.approx((0.985 - 1.0) * 1e4 / 3.0)
    assert verl.to_scale(1.005) == pytest.approx(50.0)
    plain = signals.BY_METRIC["ratio_mean"]
    assert plain.to_scale(0.985) == pytest.approx(-150.0)
    for name in ("ratio_mean@verl", "ratio_mean@ms-swift", "ratio_mean@areal"):
        assert signals.BY_METRIC[name].conversion == "capped_deviation"


def test_a_truncated_weight_mean_below_one_warns_past_three_times_the_plain_level() -> None:
    """A healthy verl run at k3 ≈ 1e-2 reads its truncated mean near 0.99 for many steps: no
    page. Raw logprobs at −200 ×1e-4 read 0.98: ratio drift fires at step 3, its threshold
    0.985 in verl's units. The same −100 on a plain ratio deviation fires."""
    healthy = [{"ratio_mean@verl": 0.99 - 0.001 * (s % 3), "entropy": 1.0} for s in range(40)]
    assert _firing(_feed(healthy)) == []
    raw = [{"ratio_mean@verl": 0.98, "entropy": 1.0} for _ in range(6)]
    fired = [f for f in _feed(raw) if f.transition.kind == "firing"]
    assert [(f.rule.name, f.metric, f.subject.step) for f in fired] == [
        ("ratio drift", "ratio_mean@verl", 3)
    ]
    assert fired[0].transition.threshold == pytest.approx(0.985)
    above = [{"ratio_mean@verl": 1.006, "entropy": 1.0} for _ in range(6)]
    assert _firing(_feed(above)) == [("ratio drift", "ratio_mean@verl", 3)]
    plain = [{"ratio_dev_1e4": -100.0, "entropy": 1.0} for _ in range(6)]
    assert _firing(_feed(plain)) == [("ratio drift", "ratio_dev_1e4", 3)]
