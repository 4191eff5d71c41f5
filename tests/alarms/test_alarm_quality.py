"""The alarm-quality benchmark: its corpus is reproducible and realistic in the ways it claims, its
scoring gives the answers worked out by hand, and its replay feeds the server each value once."""

from __future__ import annotations

import json
import statistics
from typing import Any

import numpy as np
import pytest

from benchmarks.alarm_corpus import (
    AUX,
    EXPLOSION_FACTOR,
    METRICS,
    Trace,
    corpus,
    healthy_trace,
    stored_batches,
)
from benchmarks.alarm_quality import (
    GRACE_STEPS,
    Event,
    Truth,
    default_pack,
    k3_rules,
    main,
    percentile,
    replay,
    score,
)

SPIKE = {"name": "k3 spike", "kind": "spike", "metric": "k3_kl", "severity": "warning"}
PRECURSOR = {
    "name": "precursor",
    "kind": "precursor",
    "metric": "k3_kl",
    "severity": "critical",
    "params": {"trigger_metric": "k3_kl", "follow": ["grad_norm"]},
}
MPE = {"name": "mpe", "kind": "threshold", "metric": "mult_prob_error", "severity": "warning"}
HAND_PACK = [SPIKE, PRECURSOR, MPE]
PACK = default_pack()


def _fire(rule: dict[str, Any], step: int, kind: str = "firing") -> Event:
    return Event(rule["name"], rule["severity"], kind, step, rule["metric"])


def _same(a: Trace, b: Trace) -> bool:
    return (
        (a.run_id, a.kind, a.onset, a.explosion, a.restarts)
        == (b.run_id, b.kind, b.onset, b.explosion, b.restarts)
        and np.array_equal(a.steps, b.steps)
        and np.array_equal(a.times, b.times)
        and np.array_equal(a.batch_ends, b.batch_ends)
        and a.metrics.keys() == b.metrics.keys()
        and all(np.array_equal(a.metrics[m], b.metrics[m], equal_nan=True) for m in a.metrics)
    )


# -- the corpus ------------------------------------------------------------------------------------
def test_corpus_same_seed_gives_identical_traces() -> None:
    first, second = corpus(11, "small"), corpus(11, "small")
    assert len(first) == len(second)
    assert all(_same(a, b) for a, b in zip(first, second, strict=True))


def test_corpus_different_seed_gives_different_traces() -> None:
    first, second = corpus(11, "small"), corpus(12, "small")
    assert not all(_same(a, b) for a, b in zip(first, second, strict=False))
    assert not np.array_equal(first[0].metrics["k3_kl"][:100], second[0].metrics["k3_kl"][:100])


def test_healthy_trace_has_skips_pauses_nan_bursts_and_resent_steps() -> None:
    trace = healthy_trace(np.random.default_rng(3), "h", 8_000, restarts=3)
    distinct = np.unique(trace.steps)
    assert set(trace.metrics) == set(METRICS)
    assert trace.restarts >= 1 and len(trace.steps) > len(distinct)  # re-sent steps
    assert (np.diff(distinct) > 1).any()  # steps that skip
    assert np.diff(trace.times).max() > 600  # a long pause
    assert np.isnan(trace.metrics[AUX]).any()
    assert not any(np.isnan(trace.metrics[m]).any() for m in METRICS if m != AUX)
    k3 = trace.metrics["k3_kl"]
    assert 1e-6 < float(np.median(k3)) < 3e-2
    assert (k3 > 0).all()


def test_collapse_explosion_is_first_step_grad_norm_exceeds_factor_of_prefix_median() -> None:
    for trace in corpus(5, "small"):
        if trace.kind != "collapse":
            continue
        assert trace.onset is not None and trace.explosion is not None
        first: dict[int, float] = {}
        for step, grad in zip(
            trace.steps.tolist(), trace.metrics["grad_norm"].tolist(), strict=True
        ):
            first.setdefault(step, grad)
        healthy = statistics.median(g for s, g in first.items() if s < trace.onset)
        over = sorted(
            s for s, g in first.items() if s >= trace.onset and g > EXPLOSION_FACTOR * healthy
        )
        assert over[0] == trace.explosion > trace.onset
        k3 = {
            s: v for s, v in zip(trace.steps.tolist(), trace.metrics["k3_kl"].tolist(), strict=True)
        }
        before = statistics.median(v for s, v in k3.items() if s < trace.onset)
        assert k3[trace.explosion] > 5 * before  # vllm-kl rose before grad_norm exploded


# -- what reaches the rules ------------------------------------------------------------------------
def _hand_trace(steps: list[int], k3: list[float], batch_ends: list[int]) -> Trace:
    metrics = {"k3_kl": np.asarray(k3, dtype=float)}
    times = np.arange(len(steps), dtype=float)
    return Trace(
        "hand", "healthy", np.asarray(steps), times, metrics, np.asarray(batch_ends), 0.3, 1e-3, 1
    )


def test_stored_batches_keep_first_value_of_resent_steps() -> None:
    trace = _hand_trace([1, 2, 3, 2, 3, 4, 4], [1.0, 2.0, 3.0, 20.0, 30.0, 4.0, 40.0], [3, 7])
    fed = [(step, values["k3_kl"]) for batch in stored_batches(trace) for step, _, values in batch]
    assert fed == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]


def test_restarted_trace_feeds_each_step_once_with_the_first_sent_values() -> None:
    trace = healthy_trace(np.random.default_rng(1), "h", 4_000, restarts=2)
    first: dict[int, float] = {}
    resent_differs = False
    for step, value in zip(trace.steps.tolist(), trace.metrics["k3_kl"].tolist(), strict=True):
        resent_differs |= step in first and first[step] != value
        first.setdefault(step, value)
    fed = [(step, v["k3_kl"]) for batch in stored_batches(trace) for step, _, v in batch]
    assert resent_differs  # re-sent values were computed again: keeping the last would show
    assert len(fed) == len({s for s, _ in fed}) == len(first)
    assert dict(fed) == first


def test_replay_does_not_feed_resent_steps_twice() -> None:
    high = [{"name": "k3 high", "kind": "threshold", "metric": "k3_kl", "severity": "warning",
             "params": {"threshold": 0.1, "direction": "above", "for_steps": 5}}]  # fmt: skip
    resent = _hand_trace([1, 2, 3, 4, 2, 3, 4], [0.5] * 7, [4, 7])  # 4 distinct breaching steps
    distinct = _hand_trace([1, 2, 3, 4, 5, 6, 7], [0.5] * 7, [4, 7])  # 7: the rule fires at 5
    assert replay(resent, high) == []
    assert [e.step for e in replay(distinct, high) if e.kind == "firing"] == [5]


# -- scoring ---------------------------------------------------------------------------------------
def test_k3_rules_of_default_pack_include_precursor_only_k3_watchers() -> None:
    assert k3_rules(PACK) == {"vllm-kl spike", "vllm-kl rise", "vllm-kl high", "collapse precursor"}


def test_false_alarms_count_each_firing_transition_per_10k_healthy_steps() -> None:
    healthy = Truth("h", "healthy", 20_000)
    events = [
        _fire(SPIKE, 10),
        _fire(SPIKE, 12, "resolved"),
        _fire(SPIKE, 50),
        _fire(MPE, 70),
        _fire(PRECURSOR, 90),
    ]
    figures = score([(healthy, events)], HAND_PACK)
    assert figures["false_alarms_per_10k_steps"] == 1.5  # 3 warning firings over 2 × 10k
    assert figures["critical_false_alarms_per_10k_steps"] == 0.5
    assert figures["per_rule"]["k3 spike"]["false_alarms_per_10k_steps"] == 1.0
    assert figures["healthy_steps"] == 20_000


def test_alert_before_onset_is_false_alarm_not_detection() -> None:
    collapse = Truth("c", "collapse", 10_000, onset=100, explosion=130)
    at_onset = Truth("at", "collapse", 10_000, onset=100, explosion=130)
    figures = score(
        [(collapse, [_fire(SPIKE, 90)]), (at_onset, [_fire(SPIKE, 100)])],  # 90: open at onset
        HAND_PACK,
    )
    assert figures["false_alarms_per_10k_steps"] == 0.5  # one over 20,000 healthy steps
    assert figures["detection_rate"] == 0.5
    assert figures["missed_runs"] == ["c"]
    assert figures["lead_steps_median"] == 30  # the alert at onset detects


def test_lead_time_is_from_first_k3_alert_at_or_after_onset() -> None:
    collapse = Truth("c", "collapse", 10_000, onset=100, explosion=130)
    events = [
        _fire(SPIKE, 95),  # before onset: a false alarm
        _fire(SPIKE, 97, "resolved"),
        _fire(MPE, 101),  # not a k3 rule
        _fire(SPIKE, 105),
        _fire(SPIKE, 108, "resolved"),
        _fire(SPIKE, 115),
        _fire(PRECURSOR, 120),
    ]
    figures = score([(collapse, events)], HAND_PACK)
    assert figures["detection_rate"] == 1.0
    assert figures["lead_steps_median"] == 25  # 130 − 105
    assert figures["per_rule"]["precursor"]["lead_steps_median"] == 10
    assert figures["per_rule"]["mpe"]["detections"] == 1
    assert figures["false_alarms_per_10k_steps"] == 1.0


def test_alert_after_explosion_plus_grace_is_a_miss() -> None:
    late = Truth("late", "collapse", 1_000, onset=100, explosion=130)
    just = Truth("just", "collapse", 1_000, onset=100, explosion=130)
    figures = score(
        [(late, [_fire(SPIKE, 130 + GRACE_STEPS + 1)]), (just, [_fire(SPIKE, 130 + GRACE_STEPS)])],
        HAND_PACK,
    )
    assert figures["detection_rate"] == 0.5
    assert figures["missed_runs"] == ["late"]
    assert figures["lead_steps_median"] == -GRACE_STEPS


def test_placebo_counts_k3_alerts_in_an_equal_window_just_before_onset() -> None:
    # detection window [100, 135]: 36 steps, so the placebo window is [64, 99]
    inside = Truth("inside", "collapse", 1_000, onset=100, explosion=130)
    outside = Truth("outside", "collapse", 1_000, onset=100, explosion=130)
    not_k3 = Truth("not-k3", "collapse", 1_000, onset=100, explosion=130)
    figures = score(
        [
            (inside, [_fire(SPIKE, 64)]),
            (outside, [_fire(SPIKE, 63)]),
            (not_k3, [_fire(MPE, 80)]),
        ],
        HAND_PACK,
    )
    assert figures["placebo_detection_rate"] == pytest.approx(1 / 3, abs=1e-4)


def test_percentiles_interpolate_linearly_on_known_lists() -> None:
    assert percentile(list(range(1, 11)), 50) == 5.5
    assert percentile(list(range(1, 11)), 10) == pytest.approx(1.9)
    assert percentile([], 50) is None
    runs = [Truth(f"c{i}", "collapse", 100, onset=100, explosion=200) for i in range(4)]
    leads = [4, 10, 20, 30]
    figures = score(
        [(t, [_fire(SPIKE, 200 - lead)]) for t, lead in zip(runs, leads, strict=True)], HAND_PACK
    )
    assert figures["lead_steps_median"] == 15.0
    assert figures["lead_steps_p10"] == pytest.approx(5.8)  # 4 + 0.3 × (10 − 4)


# -- the whole benchmark ---------------------------------------------------------------------------
@pytest.mark.slow
def test_small_benchmark_prints_every_key_with_sane_types(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["--scale", "small", "--json", "--seed", "3"])
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("false_alarms_per_10k_steps", "critical_false_alarms_per_10k_steps"):
        assert isinstance(figures[key], float) and figures[key] >= 0
    assert 0.0 <= figures["detection_rate"] <= 1.0
    for key in ("lead_steps_median", "lead_steps_p10"):
        assert figures[key] is None or isinstance(figures[key], float)
    assert set(figures["per_rule"]) == {s["name"] for s in PACK if s["kind"] != "stalled"}
    for rule in figures["per_rule"].values():
        assert isinstance(rule["false_alarms_per_10k_steps"], float)
        assert isinstance(rule["detections"], int)
        assert rule["lead_steps_median"] is None or isinstance(rule["lead_steps_median"], float)
    assert isinstance(figures["healthy_steps"], int) and figures["healthy_steps"] >= 4_000
    assert figures["collapse_runs"] == 4
    assert figures["seed"] == 3
    assert isinstance(figures["machine"], str) and figures["machine"]
    assert set(figures["targets"]) == {
        "false_alarms_per_10k_steps",
        "critical_false_alarms_per_10k_steps",
        "detection_rate",
        "lead_steps_median",
    }
    assert all(isinstance(t["pass"], bool) for t in figures["targets"].values())
    assert figures["pass"] == all(t["pass"] for t in figures["targets"].values())
