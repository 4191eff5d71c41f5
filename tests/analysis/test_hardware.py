"""Like-for-like hardware comparison on seeded synthetic runs whose answer is known.

k3 is modelled as log-normal: log k3 = log(true median) + run offset + AR(1) noise over steps, so
the pooled median of a GPU type is its true median and the true ratio is set by construction.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from server.analysis import hardware
from server.analysis.hardware import (
    CandidateRun,
    GpuSegment,
    RatioEstimate,
    SettingMismatch,
    all_pairs,
    describe,
    format_ratio,
    gpu_segments,
    like_for_like,
    like_for_like_by_label,
    median_ratio,
    segment_values,
)
from server.errors import Rejected


def ar1(rng: np.random.Generator, runs: int, steps: int, phi: float) -> np.ndarray:
    """Stationary AR(1) rows with unit variance: x_t = phi·x_{t-1} + sqrt(1-phi²)·e_t."""
    noise = rng.standard_normal((runs, steps))
    out = np.empty_like(noise)
    out[:, 0] = noise[:, 0]
    scale = np.sqrt(1.0 - phi**2)
    for t in range(1, steps):
        out[:, t] = phi * out[:, t - 1] + scale * noise[:, t]
    return out


def k3_runs(
    rng: np.random.Generator,
    *,
    median: float,
    runs: int,
    steps: int,
    phi: float = 0.9,
    run_sd: float = 0.3,
    step_sd: float = 0.5,
) -> list[np.ndarray]:
    logs = (
        np.log(median)
        + run_sd * rng.standard_normal((runs, 1))
        + step_sd * ar1(rng, runs, steps, phi)
    )
    return list(np.exp(logs))


# --- GPU segments ------------------------------------------------------------------------------


def test_segments_split_resumed_run_at_the_resume_step() -> None:
    records = [(s, "NVIDIA L20") for s in range(150)] + [(s, "NVIDIA H20") for s in range(150, 300)]
    assert gpu_segments(records) == [
        GpuSegment("NVIDIA L20", 0, 149),
        GpuSegment("NVIDIA H20", 150, 299),
    ]


def test_segments_start_anew_when_a_gpu_returns_later() -> None:
    records = [(0, "A100"), (1, "A100"), (2, "H20"), (3, "A100")]
    assert [s.gpu for s in gpu_segments(records)] == ["A100", "H20", "A100"]


def test_segments_follow_step_order_not_record_order() -> None:
    records = [(5, "H20"), (0, "L20"), (3, "H20"), (1, "L20")]
    assert gpu_segments(records) == [GpuSegment("L20", 0, 1), GpuSegment("H20", 3, 5)]


def test_segments_absorb_unknown_steps_between_the_same_gpu() -> None:
    records = [(0, "H20"), (1, None), (2, "unknown"), (3, ""), (4, "H20")]
    assert gpu_segments(records) == [GpuSegment("H20", 0, 4)]


def test_segments_leave_unknown_steps_between_different_gpus_unattributed() -> None:
    records = [(0, None), (1, "L20"), (2, "unknown"), (3, "H20"), (4, None)]
    segments = gpu_segments(records)
    assert segments == [GpuSegment("L20", 1, 1), GpuSegment("H20", 3, 3)]
    assert not any(s.contains(2) for s in segments)


def test_segments_are_empty_when_no_gpu_is_known() -> None:
    assert gpu_segments([(0, None), (1, "unknown")]) == []


def test_segments_label_a_step_with_several_gpus_as_a_mixed_fleet() -> None:
    records = [(0, "H20"), (0, "A100"), (1, "A100"), (1, "H20"), (2, "H20")]
    assert gpu_segments(records) == [GpuSegment("A100+H20", 0, 1), GpuSegment("H20", 2, 2)]


def test_segment_values_keep_finite_values_inside_the_segment_in_step_order() -> None:
    steps = [4, 1, 2, 3, 0, 5]
    values = [40.0, 10.0, float("nan"), 30.0, 0.5, 50.0]
    got = segment_values(steps, values, GpuSegment("H20", 1, 4))
    np.testing.assert_array_equal(got, [10.0, 30.0, 40.0])


# --- like-for-like groups ----------------------------------------------------------------------


def _run(run_id: str, gpu: str, **config: str) -> CandidateRun:
    return CandidateRun(run_id, gpu, {k.replace("__", "."): v for k, v in config.items()})


PARITY = ["logprobs_mode", "temperature", "gpu"]


def test_group_excludes_run_with_mismatching_setting_and_names_it() -> None:
    runs = [
        _run("a1", "A100", engine__logprobs_mode="processed_logprobs", sampling__temperature="1"),
        _run("a2", "A100", engine__logprobs_mode="processed_logprobs", sampling__temperature="1"),
        _run("h1", "H20", engine__logprobs_mode="processed_logprobs", sampling__temperature="1"),
        _run("h2", "H20", engine__logprobs_mode="raw_logprobs", sampling__temperature="1"),
    ]
    plan = like_for_like(runs, parity_keys=PARITY)
    assert plan.chosen is not None
    assert plan.chosen.run_ids == ("a1", "a2", "h1")
    assert plan.chosen.gpus == ("A100", "H20")
    assert [(e.run_id, e.gpu, e.mismatches) for e in plan.excluded] == [
        ("h2", "H20", (SettingMismatch("logprobs_mode", "raw_logprobs", "processed_logprobs"),))
    ]


def test_group_matches_keys_on_their_last_dotted_component() -> None:
    runs = [
        _run("a", "A100", engine__logprobs_mode="raw_logprobs"),
        _run("h", "H20", rollout__vllm__logprobs_mode="raw_logprobs"),
    ]
    plan = like_for_like(runs, parity_keys=["rollout.logprobs_mode"])
    assert plan.keys == ("logprobs_mode",)
    assert plan.chosen is not None
    assert plan.chosen.run_ids == ("a", "h")


def test_group_ignores_gpu_keys_even_when_listed_as_parity() -> None:
    runs = [_run("a", "A100", host__gpu="NVIDIA A100"), _run("h", "H20", host__gpu="NVIDIA H20")]
    plan = like_for_like(runs, parity_keys=PARITY)
    assert "gpu" not in plan.keys
    assert plan.chosen is not None
    assert plan.excluded == ()


def test_group_prefers_largest_set_spanning_two_gpus_over_larger_single_gpu_set() -> None:
    runs = [_run(f"a{i}", "A100", temperature="0.7") for i in range(4)]
    runs += [_run("a9", "A100", temperature="1"), _run("h1", "H20", temperature="1")]
    plan = like_for_like(runs, parity_keys=PARITY)
    assert plan.groups[0].run_ids == ("a0", "a1", "a2", "a3")
    assert plan.chosen is not None
    assert plan.chosen.run_ids == ("a9", "h1")
    assert {e.run_id for e in plan.excluded} == {"a0", "a1", "a2", "a3"}


def test_group_holding_the_reference_run_is_chosen_when_given() -> None:
    runs = [_run("a1", "A100", temperature="1"), _run("h1", "H20", temperature="1")]
    runs += [_run("a2", "A100", temperature="0.7")]
    plan = like_for_like(runs, parity_keys=PARITY, reference_run="a2")
    assert plan.chosen is not None
    assert plan.chosen.run_ids == ("a2",)
    with pytest.raises(Rejected, match="nope"):
        like_for_like(runs, parity_keys=PARITY, reference_run="nope")


def test_group_is_none_when_no_set_spans_two_gpus() -> None:
    runs = [_run("a", "A100", temperature="1"), _run("h", "H20", temperature="0.7")]
    plan = like_for_like(runs, parity_keys=PARITY)
    assert plan.chosen is None
    assert plan.excluded == ()
    assert len(plan.groups) == 2


def test_group_treats_a_missing_setting_as_a_difference() -> None:
    runs = [_run("a", "A100", top_p="0.9"), _run("h", "H20", top_p="0.9"), _run("x", "H20")]
    plan = like_for_like(runs, parity_keys=["top_p"])
    assert plan.excluded[0].mismatches == (SettingMismatch("top_p", None, "0.9"),)


def test_group_needs_every_same_named_key_to_agree() -> None:
    runs = [
        _run("a", "A100", engine__dtype="bf16", trainer__dtype="fp32"),
        _run("h", "H20", engine__dtype="bf16", trainer__dtype="fp32"),
        _run("x", "H20", engine__dtype="bf16", trainer__dtype="bf16"),
    ]
    plan = like_for_like(runs, parity_keys=["dtype"])
    assert plan.chosen is not None
    assert plan.chosen.run_ids == ("a", "h")
    (mismatch,) = plan.excluded[0].mismatches
    assert (mismatch.value, mismatch.group_value) == (
        "bf16",
        "engine.dtype=bf16, trainer.dtype=fp32",
    )


def test_group_counts_segments_of_a_resumed_run_as_two_gpu_types() -> None:
    config = {"engine.logprobs_mode": "processed_logprobs"}
    runs = [CandidateRun("r", "L20", config), CandidateRun("r", "H20", config)]
    plan = like_for_like(runs, parity_keys=PARITY)
    assert plan.chosen is not None
    assert plan.chosen.gpus == ("H20", "L20")


def test_label_grouping_excludes_runs_without_the_label() -> None:
    runs = [
        CandidateRun("a", "A100", labels={"recipe": "dapo"}),
        CandidateRun("h", "H20", labels={"recipe": "dapo"}),
        CandidateRun("g", "H20", labels={"recipe": "grpo"}),
        CandidateRun("n", "A100"),
        CandidateRun("m", "H20"),
    ]
    plan = like_for_like_by_label(runs, label="recipe")
    assert plan.basis == "label"
    assert plan.chosen is not None
    assert plan.chosen.run_ids == ("a", "h")
    named = {e.run_id: e.mismatches for e in plan.excluded}
    assert named["g"] == (SettingMismatch("recipe", "grpo", "dapo"),)
    assert named["n"] == (SettingMismatch("recipe", None, "dapo"),)


# --- ratios with uncertainty -------------------------------------------------------------------


def test_ratio_interval_contains_true_tenfold_and_excludes_one() -> None:
    rng = np.random.default_rng(11)
    a100 = k3_runs(rng, median=1e-2, runs=6, steps=400)
    h20 = k3_runs(rng, median=1e-3, runs=5, steps=400)
    est = median_ratio(a100, h20, gpu_a="A100", gpu_b="H20")
    assert est.lo <= 10.0 <= est.hi
    assert est.lo > 1.0
    assert (est.runs_a, est.runs_b, est.steps_a, est.steps_b) == (6, 5, 2400, 2000)


def test_ratio_interval_contains_one_for_equal_gpus() -> None:
    rng = np.random.default_rng(12)
    first = k3_runs(rng, median=1e-3, runs=5, steps=400)
    second = k3_runs(rng, median=1e-3, runs=5, steps=400)
    est = median_ratio(first, second, gpu_a="H20", gpu_b="H800")
    assert est.lo <= 1.0 <= est.hi


def test_ratio_point_estimate_is_ratio_of_pooled_medians() -> None:
    rng = np.random.default_rng(13)
    a = [rng.lognormal(-3, 1, size=n) for n in (101, 60, 7)]
    b = [rng.lognormal(-6, 1, size=n) for n in (50, 33)]
    expected = statistics.median(x for run in a for x in run.tolist()) / statistics.median(
        x for run in b for x in run.tolist()
    )
    est = median_ratio(a, b, gpu_a="A100", gpu_b="H20")
    assert est.ratio == pytest.approx(expected, rel=1e-12)
    assert est.lo <= est.ratio <= est.hi


def test_ratio_counts_every_step_even_when_long_runs_are_thinned() -> None:
    rng = np.random.default_rng(14)
    est = median_ratio(
        k3_runs(rng, median=1e-2, runs=2, steps=3000),
        k3_runs(rng, median=1e-3, runs=2, steps=3000),
        gpu_a="A100",
        gpu_b="H20",
        max_steps_per_run=500,
    )
    assert (est.steps_a, est.steps_b) == (6000, 6000)
    assert est.lo <= 10.0 <= est.hi


def test_ratio_is_reproducible_for_a_seed_and_varies_across_seeds() -> None:
    rng = np.random.default_rng(15)
    a = k3_runs(rng, median=1e-2, runs=4, steps=200)
    b = k3_runs(rng, median=1e-3, runs=4, steps=200)
    first = median_ratio(a, b, gpu_a="A100", gpu_b="H20", seed=3)
    again = median_ratio(a, b, gpu_a="A100", gpu_b="H20", seed=3)
    other = median_ratio(a, b, gpu_a="A100", gpu_b="H20", seed=4)
    assert first == again
    assert (first.lo, first.hi) != (other.lo, other.hi)


def _coverage(*, seeds: int, runs: int, steps: int, phi: float, run_sd: float, block: int | None):
    hits = 0
    for seed in range(seeds):
        rng = np.random.default_rng(1000 + seed)
        a = k3_runs(rng, median=1e-2, runs=runs, steps=steps, phi=phi, run_sd=run_sd)
        b = k3_runs(rng, median=1e-3, runs=runs, steps=steps, phi=phi, run_sd=run_sd)
        est = median_ratio(a, b, gpu_a="A", gpu_b="B", n_boot=400, seed=seed, block_length=block)
        hits += est.lo <= 10.0 <= est.hi
    return hits / seeds


def test_ratio_interval_coverage_is_near_nominal_across_seeds() -> None:
    assert _coverage(seeds=40, runs=6, steps=200, phi=0.9, run_sd=0.3, block=None) >= 0.8


def test_block_resampling_covers_where_independent_steps_undercover() -> None:
    """One run a side, so only the steps carry the uncertainty, strongly autocorrelated."""
    options = {"seeds": 40, "runs": 1, "steps": 400, "phi": 0.8, "run_sd": 0.0}
    assert _coverage(**options, block=None) >= 0.8
    assert _coverage(**options, block=1) <= 0.7


def test_all_pairs_compares_every_pair_or_each_against_the_reference() -> None:
    rng = np.random.default_rng(16)
    by_gpu = {
        g: k3_runs(rng, median=m, runs=3, steps=100)
        for g, m in [("A100", 1e-1), ("L20", 1e-2), ("H20", 1e-3)]
    }
    pairs = all_pairs(by_gpu, n_boot=200)
    assert [(e.gpu_a, e.gpu_b) for e in pairs] == [("A100", "L20"), ("A100", "H20"), ("L20", "H20")]
    for e in pairs:
        pooled_a, pooled_b = np.concatenate(by_gpu[e.gpu_a]), np.concatenate(by_gpu[e.gpu_b])
        assert e.ratio == pytest.approx(np.median(pooled_a) / np.median(pooled_b), rel=1e-12)
    against = all_pairs(by_gpu, reference="H20", n_boot=200)
    assert [(e.gpu_a, e.gpu_b) for e in against] == [("A100", "H20"), ("L20", "H20")]
    assert all_pairs(by_gpu, n_boot=200) == pairs


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        ([[1.0, -1.0]], [[1.0]], "non-negative"),
        ([[1.0, float("nan")]], [[1.0]], "finite"),
        ([[0.0, 0.0, 1.0]], [[1.0]], "median k3_kl is 0"),
        ([[]], [[1.0]], "no values"),
    ],
)
def test_ratio_rejects_unusable_values_with_the_reason(
    a: list[list[float]], b: list[list[float]], match: str
) -> None:
    with pytest.raises(Rejected, match=match):
        median_ratio(a, b, gpu_a="A100", gpu_b="H20")


def test_all_pairs_rejects_a_single_gpu_type() -> None:
    with pytest.raises(Rejected, match="two GPU types"):
        all_pairs({"H20": [[1.0, 2.0]]})


# --- the sentence ------------------------------------------------------------------------------


def _estimate(ratio: float, lo: float, hi: float, runs: tuple[int, int] = (6, 5)) -> RatioEstimate:
    return RatioEstimate("k3_kl", "H20", "A100", ratio, lo, hi, 0.95, *runs, 6000, 5000)


def test_sentence_reads_ratio_interval_and_run_counts() -> None:
    assert describe(_estimate(0.031, 0.012, 0.08)) == (
        "H20's median k3_kl is 0.031× A100's (95% interval 0.012 to 0.080; 6 vs 5 runs)"
    )


def test_sentence_adds_digits_until_distinct_numbers_read_distinct() -> None:
    text = describe(_estimate(1.004, 0.996, 1.012, runs=(1, 1)))
    assert text == "H20's median k3_kl is 1.00× A100's (95% interval 0.996 to 1.01; 1 vs 1 run)"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3.21e-5, "3.2e-5"),
        (0.0996, "0.10"),
        (0.0312, "0.031"),
        (10.4, "10"),
        (1234.0, "1200"),
        (25_000.0, "2.5e4"),
        (0.0, "0"),
        (float("inf"), "∞"),
    ],
)
def test_ratio_format_is_plain_in_the_middle_and_scientific_at_the_ends(
    value: float, text: str
) -> None:
    assert format_ratio(value) == text


def test_hardware_exports_exactly_the_public_api() -> None:
    public = {name for name in dir(hardware) if not name.startswith("_")}
    assert set(hardware.__all__) <= public
    assert set(hardware.__all__) == {
        "GPU_KEYS",
        "MAX_STEPS_PER_RUN",
        "UNKNOWN_GPU",
        "CandidateRun",
        "Exclusion",
        "GpuSegment",
        "ParityGroup",
        "ParityPlan",
        "RatioEstimate",
        "Setting",
        "SettingMismatch",
        "all_pairs",
        "describe",
        "format_ratio",
        "gpu_segments",
        "like_for_like",
        "like_for_like_by_label",
        "median_ratio",
        "segment_values",
    }
