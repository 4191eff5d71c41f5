"""The plain-Python metrics (no NumPy, no torch) against the float64 reference written from
METRICS.md's formulas, and their edges: NaN propagates, a flat list is one sequence, nothing
valid gives counts only, mismatched shapes are refused; and compute_step_metrics takes this path
on a host without NumPy and torch, refusing what only they can compute."""

from __future__ import annotations

import importlib.util
import math
import sys
from typing import Any

import numpy as np
import pytest

from collectors import _pure, compute_step_metrics
from collectors._vocabulary import PLAIN_PYTHON
from tests.collectors.closeness import allowance, assert_close
from tests.collectors.reference import reference


def random_step(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lr = np.log(rng.uniform(1e-4, 1.0, size=(5, 9)))
    lt = lr + rng.normal(0.0, 0.3, size=lr.shape)
    lt[0, 0] = lr[0, 0] + 30.0  # beyond the ±20 clamp
    mask = rng.uniform(size=lr.shape) < 0.8
    mask[4] = False  # a sequence with no valid token is left out
    return lr, lt, mask


def test_every_plain_python_metric_equals_the_reference_on_random_padded_steps() -> None:
    for seed in (3, 4, 5):
        lr, lt, mask = random_step(seed)
        got = _pure.compute(lr.tolist(), lt.tolist(), mask.astype(int).tolist())
        assert set(got) == set(PLAIN_PYTHON)
        want = reference(lr, lt, mask)
        assert_close(got, want, rel=1e-9, atol=1e-14, allow=allowance(lr, lt, mask), names=set(got))


def test_nan_propagates_into_every_metric_it_touches() -> None:
    got = _pure.compute([[-1.0, math.nan]], [[-1.1, -0.5]])
    assert got["nonfinite_tokens"] == 1.0
    for name in ("k3_kl", "ratio_max", "ratio_min", "k3_kl_max", "abs_logp_diff_max", "js_div"):
        assert math.isnan(got[name]), name


def test_infinite_logprobs_give_the_reference_values_not_an_exception() -> None:
    lr = [[-1.0, -math.inf, -2.0, 800.0]]
    lt = [[-math.inf, -math.inf, math.inf, 0.0]]
    got = _pure.compute(lr, lt)
    want = reference(np.array(lr), np.array(lt))
    assert got["nonfinite_tokens"] == 3.0
    assert_close(got, want, rel=1e-9, atol=1e-14, allow=allowance(lr, lt), names=set(got))


def test_a_flat_list_is_one_sequence() -> None:
    assert _pure.compute([-1.0, -2.0], [-1.5, -2.0]) == _pure.compute(
        [[-1.0, -2.0]], [[-1.5, -2.0]]
    )


def test_no_valid_token_gives_only_the_counts() -> None:
    assert _pure.compute([[-1.0]], [[-1.0]], [[0]]) == {"tokens": 0.0, "sequences": 0.0}


def test_shapes_that_differ_are_refused() -> None:
    with pytest.raises(ValueError, match="differ in shape"):
        _pure.compute([[-1.0, -2.0]], [[-1.0]])


@pytest.fixture
def no_numpy_no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as a host without NumPy and torch sees it: `import numpy` fails and torch
    is not found."""
    monkeypatch.setitem(sys.modules, "numpy", None)
    find_spec = importlib.util.find_spec

    def without_torch(name: str, *args: Any) -> Any:
        return None if name == "torch" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_torch)


def test_compute_step_metrics_takes_the_plain_python_path_without_numpy_and_torch(
    no_numpy_no_torch: None,
) -> None:
    lr, lt, mask = (
        [[-0.9, -2.3, -0.05], [-1.2, -0.7, 0.0]],
        [[-1.0, -2.1, -0.06], [-1.25, -0.69, 0.0]],
        [[1, 1, 1], [1, 1, 0]],
    )
    got = compute_step_metrics(lr, lt, mask)
    assert got.metrics == _pure.compute(lr, lt, mask)
    assert got.buckets == []


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"new_logprobs": [[-1.0, -2.0]]}, "new_logprobs"),
        ({"entropy": [[1.0, 1.0]]}, "entropy"),
        ({"trainer_buckets": True}, "trainer_buckets"),
        ({"exemplars": 4}, "exemplars"),
    ],
)
def test_inputs_only_numpy_or_torch_can_use_are_refused_without_them(
    no_numpy_no_torch: None, given: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match=f"{named} needs numpy or torch"):
        compute_step_metrics([[-1.0, -2.0]], [[-1.1, -2.0]], **given)
