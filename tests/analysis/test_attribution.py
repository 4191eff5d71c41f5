"""Attribution on hand-made traces whose answer is known by construction: each trace carries one
failure mode's fingerprint (a pure offset, a jump only after updates, a mismatch that switches
on with the first update, a steep bucket slope, a bf16-sized level above an fp32 reference, a
gap carried by a few tokens, a lag-tracking rise, a GPU contrast) on top of seeded log-normal
noise."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from server.analysis import attribution_checks as checks
from server.analysis import attribution_updates as updates
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
    for step in updates.update_steps(version):
        k3[step] *= 20
    series = {
        "k3_kl": k3,
        "k1_kl": consistent_k1(k3, seed=6),
        "weight_version": version,
        "prefix_cache_hit_rate": dict.fromkeys(range(STEPS), 0.4),
    }
    trace = Trace("k3_kl", series, config={"engine.enable_prefix_caching": "true"})
    found = by_name(trace)["update_jump"]
    assert updates.update_steps(version) == [5, 10, 15, 20, 25]
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
    found = updates.update_jump(k3, version)
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


def test_run_without_a_signal_gets_no_finding_and_every_check_says_why() -> None:
    # It used to rank "unknown: above the healthy level" at 0.8, a finding about a level it
    # never read; a raw-logprobs setting alone must not make a cause either.
    config = {"engine.logprobs_mode": "raw_logprobs"}
    result = attribute(Trace(None, {}, config=config))
    assert result.missing is not None and "no mismatch signal" in result.missing
    assert "--map" in result.missing
    assert all(h.score == 0 and not h.evidence for h in result.hypotheses)
    assert all(c.passed is None and c.sentence.startswith("not run") for c in result.checks)


def test_signal_without_a_finite_value_gets_no_finding() -> None:
    result = attribute(Trace("k3_kl", {"k3_kl": {1: math.nan, 2: math.inf}}))
    assert result.missing is not None and "no finite value of it" in result.missing
    assert all(h.score == 0 for h in result.hypotheses)


def test_nonfinite_values_are_skipped_not_fatal() -> None:
    k3 = noisy(3e-3, seed=20)
    k1 = {s: -2 * v for s, v in k3.items()}
    k3[3], k1[4] = math.nan, math.inf
    assert attribute(Trace("k3_kl", {"k3_kl": k3, "k1_kl": k1})).top.mode == "sampler_offset"


FLOOR = 2e-13  # k3 of an fp32 engine against an fp32 trainer (the real vLLM engine on a CPU)


def test_onset_is_found_when_state_kept_across_updates_serves_every_later_step() -> None:
    k3 = noisy(FLOOR, seed=30)
    for step in range(1, STEPS):  # from the first update on, old prompt state: stale
        k3[step] = 0.05 * (1 + step / 10)
    series = {
        "k3_kl": k3,
        "k1_kl": consistent_k1(k3, seed=31),
        "weight_version": {s: float(s) for s in range(STEPS)},  # pushed after every step
        "lag": dict.fromkeys(range(STEPS), 0.0),
        "prefix_cache_hit_rate": dict.fromkeys(range(STEPS), 0.8),
    }
    found = by_name(Trace("k3_kl", series))
    assert found["update_jump"].passed is None  # every step follows an update: no "between"
    assert found["update_onset"].passed is True
    assert found["update_onset"].figure == pytest.approx(1.0)
    top = attribute(Trace("k3_kl", series)).top
    assert top.mode == "stale_state"
    assert any("switched on with the updates" in e for e in top.evidence)
    assert any("prefix cache hit rate up to 80%" in e for e in top.evidence)


def test_onset_counts_a_cache_reset_on_every_third_update_as_stale() -> None:
    k3 = noisy(FLOOR, seed=32)
    for step in range(1, STEPS):
        if step % 3 != 0:  # the steps after a push that kept the cache
            k3[step] = 0.03
    found = updates.update_onset(k3, {s: float(s) for s in range(STEPS)}, {})
    assert found.passed is True
    assert found.figure == pytest.approx(20 / 29)  # 20 of the 29 steps after the first update


def test_onset_reads_only_steps_on_the_trainers_own_weights() -> None:
    lag = {s: float(s % 2) for s in range(STEPS)}  # weights pushed every second step
    k3 = {s: (0.05 if lag[s] else FLOOR) for s in range(STEPS)}  # off only while lagging
    version = {s: float(s - s % 2) for s in range(STEPS)}
    trace = Trace("k3_kl", {"k3_kl": k3, "weight_version": version, "lag": lag})
    found = by_name(trace)
    assert found["update_onset"].passed is False and found["update_onset"].figure == 0.0
    assert found["lag_tracking"].passed is True  # an alternating lag is off-policy too
    assert attribute(trace).top.mode == "off_policy_lag"


def test_onset_sets_its_level_on_the_trainers_own_weights_before_the_first_update() -> None:
    # the demo's stale-weights: pushed every second step, the cache kept; step 1 lags (off
    # policy) before any update, so only step 0 shows the level the engine agrees at
    lag = {s: float(s % 2) for s in range(STEPS)}
    k3 = {s: FLOOR if s == 0 else 0.03 if s == 1 else 0.1 * (1 + lag[s]) for s in range(STEPS)}
    series = {
        "k3_kl": k3,
        "weight_version": {s: float(s - s % 2) for s in range(STEPS)},
        "lag": lag,
        "prefix_cache_hit_rate": dict.fromkeys(range(STEPS), 0.83),
    }
    found = by_name(Trace("k3_kl", series))
    assert found["update_onset"].passed is True
    assert "the signal on the trainer's own weights is 2e-13" in found["update_onset"].sentence
    assert found["lag_tracking"].passed is True  # it lags too, but the cache explains more
    assert attribute(Trace("k3_kl", series)).top.mode == "stale_state"


def test_onset_is_not_run_without_steps_before_the_first_update() -> None:
    k3 = {s: v for s, v in noisy(1e-4, seed=33).items() if s >= 10}  # the range from step 10
    found = updates.update_onset(k3, updates_every(5), {})  # updates at 5, 10, 15, …
    assert found.passed is None and "before the first update" in found.sentence


def test_growing_lag_adds_its_growth_to_the_evidence() -> None:
    lag = {s: float(s // 5) for s in range(STEPS)}
    k3 = {s: 1e-3 * (1 + lag[s]) for s in range(STEPS)}
    top = attribute(Trace("k3_kl", {"k3_kl": k3, "lag": lag})).top
    assert top.mode == "off_policy_lag"
    assert top.evidence[-1] == "lag grows over the run (0.5 → 4.5)"  # thirds' medians


def test_level_is_bounded_by_ten_times_the_projects_reference() -> None:
    k3 = noisy(1e-4, seed=34, sigma=0.1)
    reference = checks.Reference("parity-0", FLOOR)
    found = checks.level(k3, healthy=checks.HEALTHY_K3, unit="k3", reference=reference)
    assert found.passed is False and found.threshold == pytest.approx(10 * FLOOR)
    assert "above 10× the project's reference run parity-0 (2e-13)" in found.sentence
    near = checks.level(noisy(3 * FLOOR, seed=35, sigma=0.1), healthy=1e-3, unit="k3",
                        reference=reference)  # fmt: skip
    assert near.passed is True


def test_reference_never_loosens_the_field_bound_and_a_zero_one_sets_none() -> None:
    k3 = noisy(5e-3, seed=36, sigma=0.1)
    loose = checks.level(k3, healthy=1e-3, unit="k3", reference=checks.Reference("moe", 1e-2))
    assert loose.passed is False and loose.threshold == 1e-3
    zero = checks.level(noisy(1e-4, seed=37), healthy=1e-3, unit="k3",
                        reference=checks.Reference("exact", 0.0))  # fmt: skip
    assert zero.passed is True and zero.threshold == 1e-3


def test_precision_size_is_the_band_bf16_rounding_leaves() -> None:
    assert checks.precision_size(noisy(5e-5, seed=38)).passed is True
    fp32 = checks.precision_size(noisy(FLOOR, seed=39))
    assert fp32.passed is False and "fp32 rounding" in fp32.sentence
    assert checks.precision_size(noisy(5e-2, seed=40)).passed is False
    assert checks.precision_size({0: 1e-4}).passed is None


def bf16_head_trace(reference: checks.Reference | None) -> Trace:
    """A bf16 head: a steady bf16-sized k3, k1 its unbiased noisy twin, flat buckets."""
    k3 = noisy(5e-5, seed=41)
    series = {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=42)}
    return Trace("k3_kl", series, buckets=buckets([5e-5] * 6 + [1e-7]), reference=reference)


def test_bf16_sized_level_above_an_fp32_reference_points_at_the_head() -> None:
    result = attribute(bf16_head_trace(checks.Reference("parity-0", FLOOR)))
    assert result.top.mode == "head_precision"
    assert result.top.evidence[0].startswith("median k3 4.89e-05: ")
    assert "the size bf16 rounding of the logits leaves" in result.top.evidence[0]
    assert any("reference run parity-0" in e for e in result.top.evidence)
    assert any(e.startswith("steady over steps") for e in result.top.evidence)


def test_bf16_sized_level_without_a_reference_is_normal_noise_with_the_head_as_a_hint() -> None:
    result = attribute(bf16_head_trace(None))
    assert result.top.mode == "normal_noise"
    head = next(h for h in result.hypotheses if h.mode == "head_precision")
    assert 0 < head.score < result.top.score
    assert "a bf16 engine rounds as much" in head.evidence[0]


def test_parity_run_near_its_reference_is_normal_noise() -> None:
    k3 = noisy(FLOOR, seed=43)
    trace = Trace("k3_kl", {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=44)},
                  reference=checks.Reference("parity-0", 1.5e-13))  # fmt: skip
    result = attribute(trace)
    assert result.top.mode == "normal_noise"
    assert all(h.score == 0 for h in result.hypotheses[1:] if h.mode != "unknown")


def chi_square_p99(k3: dict[int, float]) -> dict[int, float]:
    """The 99th-percentile token's k3 where each token's gap d is Gaussian: k3 ≈ d²/2 is then
    k3_mean × a chi-square with one degree of freedom, whose 99th percentile is 6.63."""
    return {s: 6.63 * v for s, v in k3.items()}


def test_concentration_on_few_tokens_points_at_a_sampler_only_penalty() -> None:
    k3 = noisy(2e-2, seed=45)
    series = {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=46)}
    series["k3_kl_p99"] = {s: 25 * v for s, v in k3.items()}  # a few tokens carry it
    found = by_name(Trace("k3_kl", series))["token_concentration"]
    assert found.passed is True and found.figure == pytest.approx(25.0)
    top = attribute(Trace("k3_kl", series)).top
    assert top.mode == "sampler_offset"
    assert top.evidence == (found.sentence,)


def test_gap_spread_over_the_tokens_is_not_concentrated() -> None:
    k3 = noisy(2e-2, seed=47)
    series = {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=48), "k3_kl_p99": chi_square_p99(k3)}
    found = by_name(Trace("k3_kl", series))["token_concentration"]
    assert found.passed is False and found.figure == pytest.approx(6.63)
    assert attribute(Trace("k3_kl", series)).top.mode == "unknown"


def test_concentrated_bf16_sized_gap_is_not_read_as_rounding() -> None:
    k3 = noisy(5e-5, seed=49)
    series = {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=50)}
    series["k3_kl_p99"] = {s: 30 * v for s, v in k3.items()}
    result = attribute(Trace("k3_kl", series, reference=checks.Reference("parity-0", FLOOR)))
    assert result.top.mode == "sampler_offset"
    head = next(h for h in result.hypotheses if h.mode == "head_precision")
    assert head.score == 0


def test_concentration_at_a_healthy_level_is_not_a_penalty() -> None:
    # a policy sure of most tokens leaves their gap at 0 and the fp32 noise on a few: the demo's
    # parity run reads 13× at k3 ≈ 1e-13
    k3 = noisy(FLOOR, seed=51)
    series = {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=52)}
    series["k3_kl_p99"] = {s: 13 * v for s, v in k3.items()}
    result = attribute(Trace("k3_kl", series, reference=checks.Reference("parity-0", FLOOR)))
    assert by_name(Trace("k3_kl", series))["token_concentration"].passed is True
    assert result.top.mode == "normal_noise"


def test_an_moe_runs_level_is_read_against_the_moe_bound() -> None:
    # k3 at 3e-2 with consistent k1: above the dense bound, inside the MoE one (1e-3 … 1e-1).
    k3 = noisy(3e-2, seed=31)
    series = {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=32)}
    dense = attribute(Trace("k3_kl", series, config={"model.path": "Qwen/Qwen2.5-7B"}))
    mixture = attribute(Trace("k3_kl", series, config={"model.path": "Qwen/Qwen3-30B-A3B"}))
    assert dense.top.mode == "unknown"
    assert mixture.top.mode == "normal_noise"
    level = {c.name: c for c in mixture.checks}["level"]
    assert level.passed is True and level.threshold == checks.HEALTHY_K3_MOE
    assert "the healthy bound of MoE runs 0.1" in level.sentence
