"""Attribution's new fingerprints on hand-made traces whose answer is known by construction: a
sampler-side top-p (the token-mean ratio at the kept mass), a quantized rollout named by the
config, MoE routing replay switched off, and a gap growing steadily with training — each
found where it is and not where it is not."""

from __future__ import annotations

import math

import numpy as np

from server.analysis.attribution import Trace, attribute
from tests.analysis.test_attribution import consistent_k1, noisy

STEPS = 30


def _kept_mass_ratio(top_p: float, seed: int) -> dict[int, float]:
    """A token-mean ratio of a sampler that keeps the top-p set: the kept mass per token is top-p
    plus part of the last kept token's probability (drawn here, independently of the code)."""
    rng = np.random.default_rng(seed)
    return {s: float(np.mean(top_p + rng.uniform(0, 0.05, 4000))) for s in range(STEPS)}


def test_a_ratio_at_the_kept_mass_of_the_configs_top_p_points_at_the_sampler() -> None:
    k3 = noisy(5e-3, seed=11)
    series = {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=12)}
    series["ratio_mean@verl"] = _kept_mass_ratio(0.9, seed=13)
    top = attribute(Trace("k3_kl", series, config={"rollout.top_p": "0.9"})).top
    assert top.mode == "sampler_offset"
    assert any("kept mass of top_p=0.9" in e for e in top.evidence)


def test_a_ratio_far_from_the_top_p_is_not_read_as_its_kept_mass() -> None:
    k3 = noisy(5e-3, seed=14)
    series = {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=15)}
    series["ratio_mean@verl"] = {s: 1.0 + 1e-4 * math.sin(s) for s in range(STEPS)}
    result = attribute(Trace("k3_kl", series, config={"rollout.top_p": "0.9"}))
    sampler = next(h for h in result.hypotheses if h.mode == "sampler_offset")
    assert not any("kept mass" in e for e in sampler.evidence)


def test_a_steady_level_above_healthy_with_an_fp8_engine_is_a_quantized_rollout() -> None:
    k3 = noisy(0.05, seed=16)
    series = {"k3_kl": k3, "k1_kl": consistent_k1(k3, seed=17)}
    quantized = Trace("k3_kl", series, config={"engine.quantization": "fp8"})
    assert attribute(quantized).top.mode == "quantized_rollout"
    plain = attribute(Trace("k3_kl", series, config={"engine.quantization": "none"}))
    assert plain.top.mode != "quantized_rollout"


def test_routing_replay_switching_off_is_named_with_its_step() -> None:
    k3 = {s: (1e-3 if s < 15 else 0.05) for s in range(STEPS)}
    active = {s: (1.0 if s < 15 else 0.0) for s in range(STEPS)}
    top = attribute(Trace("k3_kl", {"k3_kl": k3, "routing_replay_active": active})).top
    assert top.mode == "routing_replay"
    assert "from step 15" in top.evidence[0]


def test_a_gap_that_grows_steadily_is_drift_and_a_noisy_flat_one_is_not() -> None:
    rng = np.random.default_rng(18)
    growing = {s: 1e-4 * 1.2**s * math.exp(0.1 * rng.standard_normal()) for s in range(STEPS)}
    assert attribute(Trace("k3_kl", {"k3_kl": growing})).top.mode == "growing_gap"
    flat = noisy(1e-3, seed=19)
    modes = [h.mode for h in attribute(Trace("k3_kl", {"k3_kl": flat})).hypotheses if h.score]
    assert "growing_gap" not in modes
