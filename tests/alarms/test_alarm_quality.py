"""The alarm-quality benchmark: its corpus is reproducible and realistic in the ways it claims, its
renderings in each framework's names carry the mismatch the way that framework's estimators do,
its scoring gives the answers worked out by hand, and its replay feeds the server each value
once."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from benchmarks.alarm_corpus import (
    AUX,
    EXPLOSION_FACTOR,
    METRICS,
    SCENARIOS,
    Picture,
    Trace,
    collapse_trace,
    corpus,
    healthy_trace,
    mismatch_trace,
    stored_batches,
)
from benchmarks.alarm_quality import (
    GRACE_STEPS,
    MISMATCH_BY,
    REPORT_SEEDS,
    TUNING_SEEDS,
    Event,
    Levels,
    Truth,
    default_pack,
    k3_rules,
    main,
    mismatch_rules,
    percentile,
    replay,
    score,
    truth,
)
from benchmarks.alarm_renderings import FRAMEWORKS, render
from benchmarks.correction_corpus import RENDERINGS as SCENARIO_RENDERINGS
from server.domain import signals

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
    assert k3_rules(PACK) == {
        "vllm-kl spike",
        "vllm-kl rise",
        "vllm-kl high",
        "vllm-kl high (sampler-only setting)",
        "collapse precursor",
        # a diverging rule triggered by vllm-kl, and the exact-parity rule (labelled runs only)
        "correction going blind",
        "nonzero mismatch (exact parity)",
        "vllm-kl far beyond",
        "vllm-kl high (MoE)",  # MoE runs (labelled) at their own levels
        "vllm-kl far beyond (MoE)",
    }


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


# -- runs mismatched from their first step ---------------------------------------------------------
def test_mismatch_rules_of_default_pack_are_the_signal_rules() -> None:
    assert mismatch_rules(PACK) == {
        "vllm-kl spike",
        "vllm-kl rise",
        "vllm-kl high",
        "ratio drift",
        "mult prob error",
        "collapse precursor",
        "vllm-kl high (sampler-only setting)",
        "ratio drift (sampler-only setting)",
        # the correction-health families, and the exact-parity rules (labelled runs only)
        "IS effective sample size low",
        "correction masks many tokens",
        "correction going blind",
        "nonzero mismatch (exact parity)",
        "ratio off 1 (exact parity)",
        "routing replay off or degraded",
        "vllm-kl far beyond",
        "ratio drift far beyond",
        "vllm-kl high (MoE)",  # MoE runs (labelled) at their own levels
        "vllm-kl far beyond (MoE)",
    }


def test_mismatch_run_counts_as_alerted_only_by_a_warning_or_critical_by_its_deadline() -> None:
    ratio = {"name": "ratio drift", "kind": "threshold", "metric": signals.RATIO,
             "severity": "warning"}  # fmt: skip
    info = {"name": "lag", "kind": "sustained", "metric": "lag", "severity": "info"}
    pack = [SPIKE, ratio, info]
    runs = [Truth(f"m{i}", "mismatch", 0, scenario="raw", deadline=12) for i in range(4)]
    figures = score(
        [
            (runs[0], [_fire(ratio, 12)]),  # at the deadline: in time
            (runs[1], [_fire(ratio, 13)]),  # one step late
            (runs[2], [_fire(info, 3)]),  # not a mismatch rule
            (runs[3], [_fire(SPIKE, 5, "resolved")]),  # no firing
        ],
        pack,
    )
    assert figures["mismatch_alerted_by_step_10"] == 0.25
    assert figures["mismatch"]["raw"]["missed"] == ["m1 ()", "m2 ()", "m3 ()"]
    assert figures["healthy_steps"] == 0  # mismatched runs are no healthy steps
    assert figures["false_alarms_per_10k_steps"] == 0.0


def test_mismatch_run_no_signal_carries_is_listed_apart_not_counted_as_missed() -> None:
    ratio = {"name": "ratio drift", "kind": "threshold", "metric": signals.RATIO,
             "severity": "warning"}  # fmt: skip
    runs = [Truth(f"m{i}", "mismatch", 0, scenario="pen", deadline=10) for i in range(3)]
    figures = score(
        [(runs[0], [_fire(ratio, 4)]), (runs[1], []), (runs[2], [_fire(ratio, 9)])],
        [ratio],
        carried={"m0": True, "m1": False, "m2": False},
    )
    assert figures["mismatch_alerted_by_step_10"] == 1.0  # the one carried run
    assert figures["mismatch_all_alerted_by_step_10"] == pytest.approx(2 / 3, abs=1e-4)
    pen = figures["mismatch"]["pen"]
    assert (pen["runs"], pen["carried"], pen["alerted"], pen["alerted_all"]) == (3, 1, 1, 2)
    assert pen["missed"] == []
    assert pen["not_carried"] == ["m1 (; not alerted)", "m2 (; alerted)"]


def test_mismatch_run_is_carried_when_its_signal_passes_the_healthy_tail() -> None:
    levels = Levels()
    healthy = _hand_trace(list(range(1, 1001)), [1e-3] * 999 + [2e-2], [1000])
    levels.add(healthy, "h")  # k3: healthy 99.9th percentile ≈ 1e-3 … 2e-2
    for run_id, k3 in (("above", 5e-2), ("inside", 1e-3)):
        trace = _hand_trace(list(range(1, 31)), [k3] * 30, [30])
        levels.add(replace(trace, kind="mismatch", scenario="quantized"), run_id)
    assert levels.carried_runs() == {"above": True, "inside": False}


def test_mismatch_deadline_is_the_tenth_distinct_logged_step() -> None:
    trace = mismatch_trace(np.random.default_rng(4), "m", "quantized")
    distinct = sorted(set(trace.steps.tolist()))
    assert truth(trace).deadline == distinct[MISMATCH_BY - 1]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_mismatch_runs_are_off_from_their_first_step(scenario: str) -> None:
    trace = mismatch_trace(np.random.default_rng(8), "m", scenario)
    first = slice(0, MISMATCH_BY)
    levels = dict(trace.headline)
    if scenario == "raw-logprobs":  # the drawn offset, steady, in our ratio_dev_1e4
        dev = trace.metrics["ratio_dev_1e4"][first]
        assert np.median(dev) == pytest.approx(levels["ratio_dev_1e4"], rel=0.3)
    if scenario == "quantized":
        k3 = trace.metrics["k3_kl"][first]
        assert np.median(k3) == pytest.approx(levels["k3_kl"], rel=0.3)
    if scenario == "penalty":  # TRL's sequence ratio at the drawn mean, or below it where
        trl = render(trace, "trl").metrics["ratio_mean@trl"][first]  # the healthy gap adds
        assert 0.1 < np.median(trl) < min(0.85, levels["ratio_mean@trl"] + 0.05)


# -- the renderings --------------------------------------------------------------------------------
_LOGS = {  # rendering: (mismatch metrics it logs, the vllm-kl member read, the ratio member read)
    "ours": ({"k3_kl", "ratio_dev_1e4", "mult_prob_error"}, "k3_kl", "ratio_dev_1e4"),
    "verl": ({"k3_kl", "k1_kl", "ratio_mean@verl", "ratio_max@verl"}, "k3_kl", "ratio_mean@verl"),
    "trl": (
        {"abs_logp_diff_mean", "abs_logp_diff_max", "ratio_mean@trl"},
        "abs_logp_diff_mean",
        "ratio_mean@trl",
    ),
    "openrlhf": ({"k1_kl"}, "k1_kl", None),
    "ms-swift": ({"k1_kl", "ratio_mean@ms-swift"}, "k1_kl", "ratio_mean@ms-swift"),
    "nemo-rl": ({"k3_kl", "mult_prob_error"}, "k3_kl", None),
    "skyrl": (
        {"abs_logp_diff_mean", "abs_logp_diff_max", "ratio_mean"},
        "abs_logp_diff_mean",
        "ratio_mean",
    ),
    "areal": ({"k1_kl@areal", "ratio_mean@areal"}, "k1_kl@areal", "ratio_mean@areal"),
    "roll": (
        {"actor/train_infer_ratio_geometric_mean", "ratio_mean_seq", "ratio_dev_1e4_seq"},
        "actor/train_infer_ratio_geometric_mean",
        "ratio_dev_1e4_seq",
    ),
    "prime-rl": ({"k3_kl"}, "k3_kl", None),
    "rlinf": ({"abs_logp_diff_mean", "k1_kl@rlinf"}, "k1_kl@rlinf", None),
}


def _signals_of(trace: Trace) -> set[str]:
    return {m for m in trace.metrics if m in signals.BY_METRIC or m.split("@")[0] in (
        "ratio_mean", "ratio_max", "abs_logp_diff_max")}  # fmt: skip


@pytest.fixture(scope="module")
def collapse() -> Trace:
    return collapse_trace(np.random.default_rng(21), "c", 300, restarts=0, key=(21,))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_rendering_watches_its_own_signal_and_alerts_on_a_collapse(
    framework: str, collapse: Trace
) -> None:
    rendered = render(collapse, framework)
    assert collapse.onset is not None and collapse.explosion is not None
    if framework == "slime":
        kl = {"k3_kl_seq", "k1_kl_seq"} & set(rendered.metrics)
        assert len(kl) == 1
        logs = kl | {"abs_logp_diff_mean_seq", "ratio_dev_1e4_seq"}
        vllm_kl, ratio = kl.pop(), "ratio_dev_1e4_seq"
    else:
        logs, vllm_kl, ratio = _LOGS[framework]
    assert _signals_of(rendered) == logs
    assert {"entropy", "grad_norm", "reward_mean"} <= set(rendered.metrics)
    assert signals.strongest(signals.VLLM_KL, rendered.metrics).metric == vllm_kl  # type: ignore[union-attr]
    read = signals.strongest(signals.RATIO, rendered.metrics)
    assert (read.metric if read else None) == ratio
    fired = [
        e
        for e in replay(rendered, PACK)
        if e.kind == "firing" and e.rule in k3_rules(PACK) and e.step >= collapse.onset
    ]
    assert fired and fired[0].step < collapse.explosion
    assert fired[0].metric == vllm_kl  # the alert names the signal the framework logs


def test_rendering_is_a_pure_function_of_the_trace(collapse: Trace) -> None:
    for framework in FRAMEWORKS:
        a, b = render(collapse, framework), render(collapse, framework)
        assert a.metrics.keys() == b.metrics.keys()
        assert all(np.array_equal(a.metrics[m], b.metrics[m], equal_nan=True) for m in a.metrics)
    other = collapse_trace(np.random.default_rng(21), "c", 300, restarts=0, key=(22,))
    assert not np.array_equal(
        render(collapse, "openrlhf").metrics["k1_kl"], render(other, "openrlhf").metrics["k1_kl"]
    )  # the same run under another key draws other noise


def test_trl_run_mismatched_from_step_one_alerts_by_its_tenth_step() -> None:
    for seed, scenario in ((5, "quantized"), (6, "raw-logprobs")):
        trace = mismatch_trace(np.random.default_rng(seed), "m", scenario)
        trl = render(trace, "trl")
        assert "k3_kl" not in trl.metrics
        deadline = truth(trl).deadline
        assert deadline is not None
        fired = [e for e in replay(trl, PACK) if e.kind == "firing" and e.step <= deadline]
        assert {e.metric for e in fired} & {"abs_logp_diff_mean", "ratio_mean@trl"}


def _hand_picture_trace(w: list[float], d: list[float], *, n: int = 400, k3: float) -> Trace:
    picture = Picture(
        w=np.tile(w, (n, 1)), d=np.tile(d, (n, 1)), n_eff=1e9, offset=0.0, length=64.0, seqs=256
    )
    steps = np.arange(1, n + 1)
    metrics = {name: np.full(n, 1.0) for name in METRICS}
    metrics["k3_kl"] = np.full(n, k3)
    return Trace("hand", "healthy", steps, steps * 10.0, metrics, np.array([n]), 0.3, k3, 0,
                 picture=picture, key=(1,))  # fmt: skip


def test_k1_is_minus_the_mean_gap_so_a_one_sided_offset_reads_below_zero() -> None:
    q, a = 0.1, 0.8
    k3 = q * (math.exp(a) - 1 - a)  # tok-mean(e^d − 1 − d), computed apart
    trace = _hand_picture_trace([q], [a], k3=k3)
    k1 = render(trace, "openrlhf").metrics["k1_kl"]
    assert float(np.median(k1)) == pytest.approx(-q * a, rel=1e-3)  # tok-mean(−d)
    assert float(np.median(k1)) == pytest.approx(-2 * k3, rel=0.1)  # the demo's k1 ≈ −2·k3


def test_trl_sequence_ratio_matches_a_token_by_token_simulation() -> None:
    q, a, length = 0.05, 0.6, 64
    up = q / (1 + math.exp(a))
    trace = _hand_picture_trace([up, q - up], [a, -a], k3=0.01)
    rendered = float(render(trace, "trl").metrics["ratio_mean@trl"].mean())
    rng = np.random.default_rng(0)  # every token of 100,000 sequences, drawn one by one
    u = rng.random((100_000, length))
    d = np.where(u < up, a, np.where(u < q, -a, 0.0))
    simulated = float(np.minimum(np.exp(d.sum(axis=1)), 3.0).mean())
    assert rendered == pytest.approx(simulated, abs=0.01)
    assert simulated < 0.99  # a healthy gap over 64 tokens already pulls the capped mean down


def test_truncated_token_ratio_is_one_until_a_gap_passes_log_two() -> None:
    for a, expect_one in ((0.5, True), (1.0, False)):
        q = 0.2
        up = q / (1 + math.exp(a))
        trace = _hand_picture_trace([up, q - up], [a, -a], k3=0.01)
        mean = float(np.median(render(trace, "ms-swift").metrics["ratio_mean@ms-swift"]))
        capped = 1 + up * (min(math.exp(a), 2.0) - 1) + (q - up) * (math.exp(-a) - 1)
        assert mean == pytest.approx(capped, abs=1e-6)
        assert (abs(mean - 1) < 1e-6) == expect_one


# -- the whole benchmark ---------------------------------------------------------------------------
def test_report_seeds_are_held_out_from_the_tuning_seeds() -> None:
    assert not set(REPORT_SEEDS) & set(TUNING_SEEDS)


@pytest.mark.slow
def test_small_benchmark_prints_every_key_with_sane_types(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["--scale", "small", "--json", "--seed", "3"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["seeds"] == [3] and out["held_out"] is False  # 3 is a tuning seed
    assert isinstance(out["machine"], str) and out["machine"]
    assert set(out["renderings"]) == set(FRAMEWORKS)
    for name, figures in out["renderings"].items():
        for key in ("false_alarms_per_10k_steps", "critical_false_alarms_per_10k_steps"):
            assert isinstance(figures[key], float) and figures[key] >= 0
        for key in (
            "detection_rate",
            "detected_before_explosion",
            "mismatch_alerted_by_step_10",
            "mismatch_all_alerted_by_step_10",
        ):
            assert figures[key] is not None and 0.0 <= figures[key] <= 1.0
        for key in ("lead_steps_median", "lead_steps_p10"):
            assert figures[key] is None or isinstance(figures[key], float)
        assert set(figures["per_rule"]) == {s["name"] for s in PACK if s["kind"] != "stalled"}
        for rule in figures["per_rule"].values():
            assert isinstance(rule["false_alarms_per_10k_steps"], float)
            assert isinstance(rule["detections"], int)
            assert rule["lead_steps_median"] is None or isinstance(rule["lead_steps_median"], float)
        assert isinstance(figures["healthy_steps"], int) and figures["healthy_steps"] >= 4_000
        assert figures["collapse_runs"] == 4
        assert set(figures["mismatch"]) == set(SCENARIOS)
        assert all(m["runs"] == 4 for m in figures["mismatch"].values())
        assert set(figures["targets"]) == {
            "false_alarms_per_10k_steps",
            "critical_false_alarms_per_10k_steps",
            "detected_before_explosion",
            "lead_steps_median",
            "mismatch_alerted_by_step_10",
        }
        assert all(isinstance(t["pass"], bool) for t in figures["targets"].values())
        scenarios = figures["scenarios"]
        assert set(scenarios) == {s for s, names in SCENARIO_RENDERINGS.items() if name in names}
        for scenario in scenarios.values():
            assert scenario["runs"] == 2 and scenario["controls"] >= 2
            assert scenario["detection_rate"] == 1.0 and scenario["false_on_controls"] == 0
            assert all(isinstance(t["pass"], bool) for t in scenario["targets"].values())
        assert figures["pass"] == all(t["pass"] for t in figures["targets"].values()) and all(
            scenario["pass"] for scenario in scenarios.values()
        )
    assert out["pass"] == all(f["pass"] for f in out["renderings"].values())


def test_fresh_seeds_are_distinct_and_never_a_tuning_or_report_seed() -> None:
    from benchmarks.alarm_quality import FRESH_FLOOR, REPORT_SEEDS, TUNING_SEEDS, fresh_seeds

    drawn = iter([5, 100, 1234, 1234, 4321])  # a tuning seed, a report seed, a repeat
    seeds = fresh_seeds(2, draw=lambda _n: next(drawn))
    assert seeds == [1234, 4321]
    many = fresh_seeds(20)
    assert len(set(many)) == 20 and min(many) >= FRESH_FLOOR
    assert not set(many) & (set(TUNING_SEEDS) | set(REPORT_SEEDS))
