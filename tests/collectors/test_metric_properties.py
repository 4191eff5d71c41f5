"""Properties of the step metrics over generated steps, on every path — NumPy, torch (and CUDA
where there is one) and plain Python — each held against the float64 reference written from
METRICS.md's formulas (reference.py): odd shapes, rows with no valid token, NaN and ±Inf
anywhere, long sequences, steps with nothing valid at all."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from collectors._vocabulary import DEFAULT_EDGES, EMPTY_STEP, PLAIN_PYTHON
from tests.budget import examples
from tests.collectors.closeness import (
    MARGIN,
    PATHS,
    allowance,
    assert_buckets_close,
    assert_close,
    bucket_allowance,
    run,
    summary,
)
from tests.collectors.reference import reference

SETTINGS = settings(
    max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
Step = dict[str, np.ndarray]

# Logprobs keep clear of the bucket edges by more than float32's rounding of exp(lR), so that
# every path bins a token where the reference does.
LOG_EDGES = [math.log(e) for e in DEFAULT_EDGES[1:-1]]
LOGPROB = st.floats(-30.0, 0.0, width=32).filter(
    lambda x: all(abs(x - e) > 1e-5 for e in LOG_EDGES)
)
LOG_RATIO = st.one_of(st.floats(-1.0, 1.0, width=32), st.floats(-60.0, 60.0, width=32))


@st.composite
def steps(draw: st.DrawFn, max_seqs: int = 5, max_len: int = 24) -> Step:
    """A padded step: rollout logprobs, trainer logprobs (rollout + a log ratio), a mask, the
    new policy's logprobs (trainer + a log ratio), advantages per sequence, entropy."""
    shape = (draw(st.integers(1, max_seqs)), draw(st.integers(1, max_len)))
    lr = draw(arrays(np.float32, shape, elements=LOGPROB))
    lt = (lr + draw(arrays(np.float32, shape, elements=LOG_RATIO))).astype(np.float32)
    new = (lt + draw(arrays(np.float32, shape, elements=LOG_RATIO))).astype(np.float32)
    return {
        "lr": lr,
        "lt": lt,
        "mask": draw(arrays(np.bool_, shape)),
        "new": new,
        "adv": draw(arrays(np.float32, shape[0], elements=st.sampled_from([-1.5, 0.0, 0.5]))),
        "ent": draw(arrays(np.float32, shape, elements=st.floats(0.125, 5.0, width=32))),
    }


@st.composite
def long_steps(draw: st.DrawFn) -> Step:
    """A few sequences of up to 4096 tokens, generated from drawn parameters (NumPy fills them,
    hypothesis picks and shrinks the parameters)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = (draw(st.integers(1, 3)), draw(st.integers(256, 4096)))
    scale = draw(st.sampled_from([1e-4, 1e-2, 0.3, 2.0]))
    lr = rng.uniform(-30.0, 0.0, shape)
    for e in LOG_EDGES:  # as in `steps`
        lr[np.abs(lr - e) <= 1e-5] += 3e-5
    d = rng.normal(0.0, scale, shape)
    outliers = draw(st.integers(0, 5))
    d.flat[rng.integers(0, d.size, outliers)] = rng.uniform(-40.0, 40.0, outliers)
    mask = rng.uniform(size=shape) < draw(st.floats(0.05, 1.0))
    lr32 = lr.astype(np.float32)
    return {"lr": lr32, "lt": (lr32 + d).astype(np.float32), "mask": mask}


def with_nonfinite(draw: st.DrawFn, step: Step) -> Step:
    """The step with NaN, +Inf or −Inf put in a few places of either logprob grid."""
    out = {k: v.copy() for k, v in step.items()}
    rows, cols = out["lr"].shape
    for _ in range(draw(st.integers(1, 4))):
        grid = out[draw(st.sampled_from(["lr", "lt"]))]
        i, j = draw(st.integers(0, rows - 1)), draw(st.integers(0, cols - 1))
        grid[i, j] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    return out


def check_array_path(path: str, x: Step, *, update: bool = False) -> None:
    """Every metric and the bucket table of one step by an array path against the reference;
    with `update`, also given the new logprobs, advantages and entropy."""
    base = (x["lr"], x["lt"], x["mask"])
    extra = {"new": x["new"], "adv": x["adv"], "ent": x["ent"]} if update else {}
    want = reference(*base, **extra)
    optional = (
        {"new_logprobs": x["new"], "advantages": x["adv"], "entropy": x["ent"]} if update else {}
    )
    got = summary(path, *base, **optional)
    if want == dict.fromkeys(EMPTY_STEP, 0.0):
        assert (got.metrics, got.buckets) == (want, [])
        return
    assert set(got.metrics) == set(want) - {"buckets"}
    band = (reference(*base, **extra, margin=MARGIN), reference(*base, **extra, margin=-MARGIN))
    allow = allowance(*base, new=extra.get("new"), ent=extra.get("ent"))
    assert_close(got.metrics, want, allow=allow, band=band)
    (table,) = got.buckets
    assert table["edges"] == list(DEFAULT_EDGES)
    buckets = (band[0]["buckets"], band[1]["buckets"])
    assert_buckets_close(table, want["buckets"], allow=bucket_allowance(*base), band=buckets)


def check_pure_path(x: Step) -> None:
    want = reference(x["lr"], x["lt"], x["mask"])
    got = run("pure", x["lr"], x["lt"], x["mask"].astype(int))
    if want == dict.fromkeys(EMPTY_STEP, 0.0):
        assert got == want
        return
    assert set(got) == set(PLAIN_PYTHON)
    # float64 on both sides; the reference's literal exp(d) − 1 − d loses ~1e-16 near d = 0
    allow = allowance(x["lr"], x["lt"], x["mask"])
    assert_close(got, want, rel=1e-9, atol=1e-14, names=set(PLAIN_PYTHON), allow=allow)


# -- against the reference ------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
@SETTINGS
@given(x=steps())
def test_every_metric_equals_the_reference_on_any_small_step(path: str, x: Step) -> None:
    check_array_path(path, x, update=True)


@SETTINGS
@given(x=steps())
def test_the_plain_python_metrics_equal_the_reference_on_any_small_step(x: Step) -> None:
    check_pure_path(x)


@pytest.mark.parametrize("path", PATHS)
@SETTINGS
@given(data=st.data(), step=steps())
def test_nan_and_inf_reach_the_metrics_they_touch_as_in_the_reference(
    path: str, data: st.DataObject, step: Step
) -> None:
    check_array_path(path, with_nonfinite(data.draw, step))


@SETTINGS
@given(data=st.data(), step=steps())
def test_nan_and_inf_reach_the_plain_python_metrics_as_in_the_reference(
    data: st.DataObject, step: Step
) -> None:
    check_pure_path(with_nonfinite(data.draw, step))


@pytest.mark.parametrize("path", PATHS)
@settings(SETTINGS, max_examples=examples(15))
@given(x=long_steps())
def test_long_sequences_equal_the_reference(path: str, x: Step) -> None:
    check_array_path(path, x)


@settings(SETTINGS, max_examples=examples(8))
@given(x=long_steps())
def test_long_sequences_in_plain_python_equal_the_reference(x: Step) -> None:
    check_pure_path(x)


# -- what the mask means --------------------------------------------------------------------


@pytest.mark.parametrize("path", [*PATHS, "pure"])
@SETTINGS
@given(data=st.data(), step=steps())
def test_a_step_with_nothing_valid_reports_only_its_counts(
    path: str, data: st.DataObject, step: Step
) -> None:
    x = with_nonfinite(data.draw, step)
    mask = np.zeros(x["lr"].shape, dtype=bool)
    assert run(path, x["lr"], x["lt"], mask) == dict.fromkeys(EMPTY_STEP, 0.0)


@pytest.mark.parametrize("path", [*PATHS, "pure"])
@SETTINGS
@given(data=st.data(), step=steps())
def test_whatever_padding_holds_changes_nothing(path: str, data: st.DataObject, step: Step) -> None:
    x = with_nonfinite(data.draw, step)
    padded = {k: v.copy() for k, v in x.items()}
    for name in ("lr", "lt"):
        padded[name][~x["mask"]] = data.draw(st.sampled_from([math.nan, math.inf, 7.0]))
    clean = run(path, x["lr"], x["lt"], x["mask"])
    dirty = run(path, padded["lr"], padded["lt"], x["mask"])
    assert dirty.keys() == clean.keys()
    assert all(_identical(dirty[k], clean[k]) for k in clean), (dirty, clean)


@pytest.mark.parametrize("path", PATHS)
@SETTINGS
@given(x=steps())
def test_padded_and_packed_layouts_give_the_same_metrics(path: str, x: Step) -> None:
    keep = x["mask"]
    if not keep.any():
        return
    lens = keep.sum(axis=1)
    packed = {k: np.concatenate([x[k][i][keep[i]] for i in range(len(keep))]) for k in ("lr", "lt")}
    padded = summary(path, x["lr"], x["lt"], keep)
    flat = summary(path, packed["lr"], packed["lt"], seq_lens=lens)
    assert flat.metrics.keys() == padded.metrics.keys()
    # the same numbers summed in another order: held as to the reference, to the padded result
    assert_close(flat.metrics, padded.metrics, allow=allowance(x["lr"], x["lt"], keep))
    assert flat.buckets[0]["tokens"] == padded.buckets[0]["tokens"]


def _identical(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))
