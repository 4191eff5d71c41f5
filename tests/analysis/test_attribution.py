"""Attribution on hand-made traces whose answer is known by construction: each trace carries one
failure mode's fingerprint (a pure offset, a jump only after updates, a steep bucket slope, a
lag-tracking rise, a GPU contrast) on top of seeded log-normal noise."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from server.analysis import attribution_checks as checks
from server.analysis.attribution import Trace, attribute
from server.analysis.attribution_checks import Bucket, GpuContrast

STEPS = 30


def noisy(level: float, *, seed: int, steps: int = STEPS, sigma: float = 0.3) -> dict[int, float]:
    """A k3-like series: `level` times log-normal noise (k3's noise is multiplicative)."""
    rng = np.random.default_rng(seed)
    return {s: level * math.exp(sigma * rng.standard_normal()) for s in range(steps)}


def consistent_k1(k3: dict[int, float], *, seed: int) -> dict[int, float]:
    """k1 of a healthy pair: the same KL as k3, with k1's sampling noise (both signs)."""
    rng = np.random.default_rng(seed)
    return {s: v * (1 + 0.1 * rng.standard_normal()) for s, v in k3.items()}


def by_name(trace: Trace) -> dict[str, checks.Check]:
    return {c.name: c for c in attribute(trace).checks}


def test_offset_is_found_when_k1_sits_at_minus_twice_k3() -> None:
    k3 = noisy(3e-3, seed=1)
    trace = Trace("k3_kl", {"k3_kl": k3, "k1_kl": {s: -2 * v for s, v in k3.items()}})
    found = by_name(trace)["mean_offset"]
    assert found.passed is True
    assert found.figure == pytest.approx(3.0)  # |k3 − (−2 k3)| / k3
    assert "steadily above the rollout's" in found.sentence  # mean d = −k1 = 2 k3 > 0
    assert attribute(trace).top.mode == "sampler_offset"


def test_offset_is_not_found_when_k1_matches_k3_up_to_noise() -> None:
    k3 = noisy(3e-3, seed=2)
    trace = Trace("k3_kl", {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=3)})
    found = by_name(trace)["mean_offset"]
    assert found.passed is False
    assert found.figure is not None and found.figure < checks.OFFSET_SHARE


def test_offset_is_read_from_ratio_drift_when_the_run_logs_no_k1() -> None:
    drift = {s: 200.0 + 20 * math.sin(s) for s in range(STEPS)}
    trace = Trace("ratio_dev_1e4", {"ratio_dev_1e4": drift})
    found = by_name(trace)["mean_offset"]
    assert found.passed is True
    assert found.figure == pytest.approx(float(np.median(list(drift.values()))))
    assert attribute(trace).top.mode == "sampler_offset"


def test_offset_present_from_the_first_steps_scores_above_one_that_grows_in() -> None:
    k3 = noisy(3e-3, seed=24)
    steady = {s: -2 * v for s, v in k3.items()}
    grown = {s: (-2 * v if s >= STEPS // 2 else v) for s, v in k3.items()}
    from_start = attribute(Trace("k3_kl", {"k3_kl": k3, "k1_kl": steady})).top
    later = attribute(Trace("k3_kl", {"k3_kl": k3, "k1_kl": grown})).top
    assert from_start.mode == "sampler_offset"
    assert any("first steps" in e for e in from_start.evidence)
    assert later.mode != "sampler_offset" or later.score < from_start.score


def test_offset_of_unsteady_sign_is_not_an_offset() -> None:
    drift = {s: 200.0 * (-1) ** s for s in range(STEPS)}
    assert by_name(Trace("ratio_dev_1e4", {"ratio_dev_1e4": drift}))["mean_offset"].passed is False


def test_raw_logprobs_config_raises_the_offset_and_is_shown_beside_it() -> None:
    k3 = noisy(3e-3, seed=4)
    series = {"k3_kl": k3, "k1_kl": {s: -2 * v for s, v in k3.items()}}
    plain = attribute(Trace("k3_kl", series)).top
    config = {"engine.logprobs_mode": "raw_logprobs", "engine.temperature": "0.7"}
    raised = attribute(Trace("k3_kl", series, config=config)).top
    assert raised.mode == plain.mode == "sampler_offset"
    assert raised.score > plain.score
    assert {(n.key, n.effect) for n in raised.config} == {
        ("engine.logprobs_mode", "raises"),
        ("engine.temperature", "raises"),
    }


def test_temperature_counts_only_beside_raw_logprobs() -> None:
    k3 = noisy(1e-4, seed=25)
    series = {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=26)}
    processed = {"engine.logprobs_mode": "processed_logprobs", "engine.temperature": "0.7"}
    result = attribute(Trace("k3_kl", series, config=processed))
    assert result.top.mode == "normal_noise"
    offset = next(h for h in result.hypotheses if h.mode == "sampler_offset")
    assert [(n.key, n.effect) for n in offset.config] == [("engine.logprobs_mode", "lowers")]


def test_fp32_head_on_the_other_side_does_not_cancel_a_bf16_head() -> None:
    config = {"engine.head_dtype": "bfloat16", "trainer.lm_head_dtype": "float32"}
    result = attribute(Trace("k3_kl", {"k3_kl": noisy(1e-4, seed=27)}, config=config))
    head = next(h for h in result.hypotheses if h.mode == "head_precision")
    assert head.score > 0 and {n.effect for n in head.config} == {"raises", "lowers"}


def updates_every(period: int) -> dict[int, float]:
    return {s: float(s // period) for s in range(STEPS)}


def test_jump_is_found_when_k3_rises_only_at_weight_updates() -> None:
    k3 = noisy(1e-4, seed=5)
    version = updates_every(5)
    for step in checks.update_steps(version):
        k3[step] *= 20
    series = {
        "k3_kl": k3,
        "k1_kl": consistent_k1(k3, seed=6),
        "weight_version": version,
        "prefix_cache_hit_rate": dict.fromkeys(range(STEPS), 0.4),
    }
    trace = Trace("k3_kl", series, config={"engine.enable_prefix_caching": "true"})
    found = by_name(trace)["update_jump"]
    assert checks.update_steps(version) == [5, 10, 15, 20, 25]
    assert found.passed is True
    assert found.figure is not None and found.figure > 10
    top = attribute(trace).top
    assert top.mode == "stale_state"
    assert any("prefix cache" in e for e in top.evidence)


def test_jump_away_from_updates_is_not_update_aligned() -> None:
    k3 = noisy(1e-4, seed=7)
    for step in (7, 13, 22):  # spikes between updates, none at them
        k3[step] *= 20
    trace = Trace("k3_kl", {"k3_kl": k3, "weight_version": updates_every(5)})
    assert by_name(trace)["update_jump"].passed is False


def test_jump_is_read_at_the_first_logged_step_after_each_update() -> None:
    k3 = {s: v for s, v in noisy(1e-4, seed=21).items() if s % 2 == 0}  # logged every 2 steps
    version = {s: float((s + 1) // 6) for s in range(STEPS)}  # updates at 5, 11, 17, 23, 29
    for step in (6, 12, 18, 24):  # the first logged step after each update
        k3[step] *= 20
    found = checks.update_jump(k3, version)
    assert found.passed is True
    assert found.figure is not None and found.figure > 10


def test_jump_check_is_not_run_without_weight_versions() -> None:
    found = by_name(Trace("k3_kl", {"k3_kl": noisy(1e-4, seed=8)}))["update_jump"]
    assert found.passed is None and "weight_version" in found.sentence


EDGES = [0.0, 1e-4, 1e-3, 1e-2, 1e-1, 0.5, 0.9, 1.0]


def buckets(per_token_k3: list[float], tokens: float = 1000.0) -> list[Bucket]:
    return [
        Bucket(lo, hi, tokens, k3 * tokens)
        for (lo, hi), k3 in zip(itertools.pairwise(EDGES), per_token_k3, strict=True)
    ]


def test_bucket_slope_is_one_decade_per_decade_when_k3_goes_as_one_over_p() -> None:
    mids = [1e-5, math.sqrt(1e-7), math.sqrt(1e-5), math.sqrt(1e-3), math.sqrt(0.05)]
    mids += [math.sqrt(0.45), math.sqrt(0.9)]
    found = checks.bucket_slope(buckets([1e-6 / p for p in mids]))
    assert found.passed is True
    assert found.figure == pytest.approx(1.0)


def test_steep_buckets_with_a_high_steady_level_point_at_the_head() -> None:
    k3 = noisy(5e-3, seed=9)
    per_token = [5e-1, 1e-1, 3e-2, 5e-3, 1e-3, 2e-4, 5e-5]
    trace = Trace(
        "k3_kl",
        {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=10)},
        buckets=buckets(per_token),
        config={"engine.head_dtype": "bfloat16"},
    )
    result = attribute(trace)
    assert result.top.mode == "head_precision"
    assert [n.effect for n in result.top.config] == ["raises"]


def test_flat_buckets_are_not_steep() -> None:
    found = checks.bucket_slope(buckets([1e-3] * 7))
    assert found.passed is False
    assert found.figure == pytest.approx(0.0, abs=1e-9)


def test_lag_tracking_rise_points_at_off_policy_lag() -> None:
    rng = np.random.default_rng(11)
    lag = {s: float(s // 3) for s in range(STEPS)}
    k3 = {s: 1e-4 * (1 + lag[s]) * math.exp(0.1 * rng.standard_normal()) for s in range(STEPS)}
    trace = Trace("k3_kl", {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=12), "lag": lag})
    found = by_name(trace)["lag_tracking"]
    assert found.passed is True
    assert found.figure is not None and found.figure > 0.9
    assert attribute(trace).top.mode == "off_policy_lag"


def test_lag_without_a_link_to_the_signal_is_not_tracking() -> None:
    lag = {s: float(s // 3) for s in range(STEPS)}
    trace = Trace("k3_kl", {"k3_kl": noisy(1e-4, seed=13, sigma=0.5), "lag": lag})
    assert by_name(trace)["lag_tracking"].passed is False


def test_spearman_matches_pearson_of_ranks_with_ties() -> None:
    a = [1.0, 2.0, 2.0, 5.0, 4.0]
    b = [10.0, 30.0, 20.0, 50.0, 40.0]
    ranks_a = [0.0, 1.5, 1.5, 4.0, 3.0]  # written out by hand
    ranks_b = [0.0, 2.0, 1.0, 4.0, 3.0]
    assert checks.spearman(a, b) == pytest.approx(float(np.corrcoef(ranks_a, ranks_b)[0, 1]))


def test_gpu_contrast_above_one_points_at_the_gpu() -> None:
    k3 = noisy(2e-2, seed=14)
    contrast = GpuContrast("A100", "H20", 12.0, 6.0, 25.0)
    trace = Trace("k3_kl", {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=15)}, gpu=contrast)
    assert attribute(trace).top.mode == "gpu_kernels"
    inside = GpuContrast("A100", "H20", 1.1, 0.8, 1.5)
    assert checks.gpu_contrast(inside).passed is False


def test_healthy_run_is_within_normal_noise() -> None:
    k3 = noisy(1e-4, seed=16)
    result = attribute(Trace("k3_kl", {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=17)}))
    assert result.top.mode == "normal_noise"
    assert result.steps == STEPS


def test_recent_rise_past_the_healthy_bound_is_not_normal_noise() -> None:
    k3 = noisy(1e-4, seed=22)
    for step in range(STEPS - 5, STEPS):  # the last 5 steps collapse
        k3[step] *= 100
    trace = Trace("k3_kl", {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=23)})
    found = by_name(trace)["level"]
    assert found.passed is False and "latest median" in found.sentence
    assert attribute(trace).top.mode == "unknown"


def test_high_level_without_a_fingerprint_is_unknown() -> None:
    k3 = noisy(5e-2, seed=18)
    result = attribute(Trace("k3_kl", {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=19)}))
    assert result.top.mode == "unknown"


def test_run_without_a_signal_is_unknown_and_every_check_says_why() -> None:
    result = attribute(Trace(None, {}))
    assert result.top.mode == "unknown"
    assert all(c.passed is None and c.sentence.startswith("not run") for c in result.checks)


def test_nonfinite_values_are_skipped_not_fatal() -> None:
    k3 = noisy(3e-3, seed=20)
    k1 = {s: -2 * v for s, v in k3.items()}
    k3[3], k1[4] = math.nan, math.inf
    assert attribute(Trace("k3_kl", {"k3_kl": k3, "k1_kl": k1})).top.mode == "sampler_offset"
