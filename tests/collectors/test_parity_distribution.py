"""Whole-distribution parity, the pure part: KL and total variation over the vocabulary against
a float64 reference written with explicit sums (math.exp and math.log token by token), and the
cases a top-p or top-k cut brings: -inf on one side or both."""

from __future__ import annotations

import math

import numpy as np
import pytest

from collectors._parity._distribution import dense, divergences, position


def _reference(le: list[float], lt: list[float]) -> tuple[float, float]:
    kl = tv = 0.0
    for a, b in zip(le, lt, strict=True):
        pa = 0.0 if a == -math.inf else math.exp(a)
        pb = 0.0 if b == -math.inf else math.exp(b)
        tv += abs(pa - pb) / 2
        if pa > 0:
            kl += math.inf if pb == 0 else pa * (a - b)
    return kl, tv


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max()
    return shifted - np.log(np.exp(shifted).sum())  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kl_and_total_variation_match_a_token_by_token_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 3, 64)
    engine = _log_softmax(logits / 0.7)
    trainer = _log_softmax(logits / 0.7 + rng.normal(0, 0.05, 64))
    kl, tv = position(engine, trainer)
    ref_kl, ref_tv = _reference(engine.tolist(), trainer.tolist())
    assert kl == pytest.approx(ref_kl, rel=1e-9, abs=1e-15)
    assert tv == pytest.approx(ref_tv, rel=1e-9)
    assert kl > 0 and 0 < tv < 1


def test_identical_distributions_read_zero() -> None:
    row = _log_softmax(np.linspace(-2, 2, 16))
    assert position(row, row) == (0.0, 0.0)


def test_a_token_the_trainer_gives_no_mass_makes_the_kl_infinite_not_the_tv() -> None:
    engine = np.array([math.log(0.5), math.log(0.5), -math.inf])
    trainer = np.array([0.0, -math.inf, -math.inf])
    kl, tv = position(engine, trainer)
    assert kl == math.inf and tv == pytest.approx(0.5)


def test_a_cut_on_the_engine_side_only_is_a_finite_kl() -> None:
    # engine renormalised over its top-2 tokens, trainer over all three: the top-p trap
    trainer = np.log(np.array([0.6, 0.3, 0.1]))
    engine = np.array([math.log(0.6 / 0.9), math.log(0.3 / 0.9), -math.inf])
    kl, tv = position(engine, trainer)
    assert kl == pytest.approx(-math.log(0.9))  # log of the kept mass
    assert tv == pytest.approx(0.1)


def test_dense_places_each_token_and_divergences_aggregate_over_positions() -> None:
    row = dense({0: math.log(0.25), 2: math.log(0.75)}, 4)
    assert row[1] == -math.inf and row[3] == -math.inf and math.exp(row[2]) == pytest.approx(0.75)
    other = np.array([math.log(0.5), -math.inf, math.log(0.5), -math.inf])
    got = divergences([row, row], [row, other])
    kl_one, tv_one = _reference(row.tolist(), other.tolist())
    assert got == pytest.approx(
        {
            "full_kl_mean": kl_one / 2,
            "full_kl_max": kl_one,
            "full_tv_mean": tv_one / 2,
            "full_tv_max": tv_one,
            "full_kl_finite_mean": kl_one / 2,
            "full_support_mismatch_rate": 0.0,
        }
    )
    assert divergences([], []) == {}


def test_positions_whose_supports_differ_are_counted_apart_from_the_finite_mean() -> None:
    same = np.log(np.array([0.5, 0.5]))
    cut = np.array([0.0, -math.inf])
    got = divergences([same, same], [same, cut])
    assert got["full_kl_mean"] == math.inf and got["full_support_mismatch_rate"] == 0.5
    assert got["full_kl_finite_mean"] == 0.0
