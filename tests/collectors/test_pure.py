"""The plain-Python headline metrics (no NumPy, no torch) against the independent float64
reference, and their edges: NaN propagates, a flat list is one sequence, nothing valid gives
counts only, mismatched shapes are refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from collectors import _pure
from tests.collectors.reference import reference

EXTRA = ("ratio_std", "ratio_min", "ratio_max", "ratio_dev_1e4", "k3_kl_max")
EXTRA += ("abs_logp_diff_max", "k1_kl_seq", "k3_kl_seq", "nonfinite_tokens")


def test_headline_metrics_equal_the_reference_on_random_padded_steps() -> None:
    rng = np.random.default_rng(3)
    lr = np.log(rng.uniform(1e-4, 1.0, size=(5, 9)))
    lt = lr + rng.normal(0.0, 0.3, size=lr.shape)
    lt[0, 0] = lr[0, 0] + 30.0  # beyond the ±20 clamp
    mask = rng.uniform(size=lr.shape) < 0.8
    mask[4] = False  # a sequence with no valid token is left out
    got = _pure.compute(lr.tolist(), lt.tolist(), mask.astype(int).tolist())
    expected = reference(lr, lt, mask)
    for name in (*_pure.METRICS, *EXTRA, "tokens", "sequences"):
        assert got[name] == pytest.approx(expected[name], rel=1e-9, abs=1e-12), name


def test_nan_propagates_into_every_metric_it_touches() -> None:
    got = _pure.compute([[-1.0, math.nan]], [[-1.1, -0.5]])
    assert got["nonfinite_tokens"] == 1.0
    for name in ("k3_kl", "ratio_max", "ratio_min", "k3_kl_max", "abs_logp_diff_max"):
        assert math.isnan(got[name]), name


def test_a_flat_list_is_one_sequence() -> None:
    assert _pure.compute([-1.0, -2.0], [-1.5, -2.0]) == _pure.compute(
        [[-1.0, -2.0]], [[-1.5, -2.0]]
    )


def test_no_valid_token_gives_only_the_counts() -> None:
    assert _pure.compute([[-1.0]], [[-1.0]], [[0]]) == {"tokens": 0.0, "sequences": 0.0}


def test_shapes_that_differ_are_refused() -> None:
    with pytest.raises(ValueError, match="differ in shape"):
        _pure.compute([[-1.0, -2.0]], [[-1.0]])
