"""The resampling engine: exact replicate medians, block lengths that follow autocorrelation."""

from __future__ import annotations

import itertools

import numpy as np

from server.analysis import block_bootstrap


def _ar1(rng: np.random.Generator, steps: int, phi: float) -> np.ndarray:
    out = np.empty(steps)
    out[0] = rng.standard_normal()
    for t in range(1, steps):
        out[t] = phi * out[t - 1] + np.sqrt(1 - phi**2) * rng.standard_normal()
    return out


def test_replicate_medians_are_exact_for_runs_of_different_lengths() -> None:
    """With one block per run a resampled run is a rotation of itself, so every replicate's
    median must be the median of some multiset of whole runs: odd and even totals, padded."""
    rng = np.random.default_rng(1)
    runs = [rng.lognormal(size=n) for n in (7, 12, 4)]
    possible = {
        round(float(np.median(np.concatenate(combo))), 12)
        for combo in itertools.combinations_with_replacement(runs, len(runs))
    }
    medians = block_bootstrap.pooled_medians(runs, [7, 12, 4], 3000, np.random.default_rng(2))
    assert {round(float(m), 12) for m in medians} == possible


def test_replicate_medians_of_one_run_with_whole_run_blocks_equal_its_median() -> None:
    run = np.random.default_rng(3).lognormal(size=10)
    medians = block_bootstrap.pooled_medians([run], [10], 200, np.random.default_rng(4))
    np.testing.assert_array_equal(medians, np.full(200, np.median(run)))


def test_replicate_medians_vary_when_blocks_are_shorter_than_the_run() -> None:
    run = np.random.default_rng(5).lognormal(size=200)
    medians = block_bootstrap.pooled_medians([run], [5], 300, np.random.default_rng(6))
    assert np.unique(medians).size > 50
    assert run.min() <= medians.min() and medians.max() <= run.max()


def test_block_length_grows_with_autocorrelation() -> None:
    rng = np.random.default_rng(7)
    independent = [block_bootstrap.block_length(rng.standard_normal(1000)) for _ in range(5)]
    drifting = [block_bootstrap.block_length(_ar1(rng, 1000, 0.9)) for _ in range(5)]
    assert max(independent) <= 3
    assert min(drifting) >= 15


def test_block_length_is_one_for_constant_or_very_short_series() -> None:
    assert block_bootstrap.block_length(np.full(500, 1e-3)) == 1
    assert block_bootstrap.block_length(np.array([1.0, 5.0, 2.0])) == 1


def test_thin_keeps_step_order_with_a_fixed_stride() -> None:
    series = np.arange(5003.0)
    thinned = block_bootstrap.thin(series, 1000)
    assert thinned.size <= 1000
    np.testing.assert_array_equal(np.diff(thinned), np.full(thinned.size - 1, 6.0))
    np.testing.assert_array_equal(block_bootstrap.thin(series[:800], 1000), series[:800])


def test_replicate_medians_of_values_at_the_float_limit_stay_finite() -> None:
    """The contract allows ±1e308: the middle of two such values must not overflow to ±inf."""
    runs = [np.array([1e308]), np.array([1.7e308])]  # an even total: two middle values
    medians = block_bootstrap.pooled_medians(runs, [1, 1], 200, np.random.default_rng(8))
    assert set(medians.tolist()) == {1e308, 1.35e308, 1.7e308}
