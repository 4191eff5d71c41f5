"""A spike far beyond a run's own history is named as one, never as noise."""

from __future__ import annotations

import math
import random

from server.analysis.excursion import FACTOR, excursion


def _history(n: int = 200, level: float = 1e-3, seed: int = 3) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + 0.3 * rng.random()) for _ in range(n)]


def test_a_thousandfold_spike_is_an_excursion_with_its_factor() -> None:
    history = _history()
    found = excursion(1.0, 250, history)
    assert found is not None
    # the reference tail, computed another way: sorted values, nearest-rank-ish 99th percentile
    ordered = sorted(history)
    tail = ordered[round(0.99 * (len(ordered) - 1))]
    assert math.isclose(found.baseline, tail, rel_tol=0.01)
    assert math.isclose(found.factor, 1.0 / tail, rel_tol=0.01)
    sentence = found.sentence("k3")
    assert "step 250" in sentence and "1 at step" in sentence
    assert "noise" not in sentence


def test_a_value_within_a_decade_of_the_runs_own_tail_is_not_an_excursion() -> None:
    history = _history()
    assert excursion(max(history) * (FACTOR - 1), 250, history) is None


def test_a_non_finite_value_after_finite_history_is_an_excursion() -> None:
    for value in (math.nan, math.inf):
        found = excursion(value, 9, _history(20))
        assert found is not None
        assert str(value) in found.sentence("k3")


def test_too_little_history_decides_nothing() -> None:
    assert excursion(1.0, 3, [1e-3, 1e-3, math.nan, math.inf]) is None


def test_the_breachs_own_earlier_steps_are_not_the_runs_level() -> None:
    # A rule that fires on a spike's fourth step has its first three in the history.
    history = [*_history(40), 0.2, 0.21, 0.19]
    found = excursion(0.2, 43, history)
    assert found is not None
    assert found.steps == 40 and found.baseline < 1.3e-3 + 1e-12
    assert found.factor > 150


def test_a_run_that_lives_high_is_its_own_level() -> None:
    # Forty steps at a level are the run's level, whatever came before; only the breach's last
    # fifty steps at most are ever set aside.
    history = _history(40) + [0.2] * 60
    assert excursion(0.2, 100, history) is None
