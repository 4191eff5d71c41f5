"""compute_step_metrics, on NumPy and on torch (CUDA too where there is one), against the
float64 reference written from METRICS.md's formulas (reference.py), on fixed steps that show
each rule: the clamp, NaN, padding, layouts, advantages per token or per sequence, bf16."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from collectors import DEFAULT_EDGES, compute_step_metrics
from collectors._metrics import merge_buckets
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
from tests.collectors.reference import bucket_table, reference, sequences


def make_inputs(seed: int, b: int = 6, t: int = 40, scale: float = 0.3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lr = np.log(rng.uniform(1e-5, 1.0, (b, t))).astype(np.float32)
    lt = (lr + rng.normal(0, scale, (b, t))).astype(np.float32)
    lt = np.minimum(lt, 0.0)
    mask = rng.uniform(size=(b, t)) < 0.8
    mask[0, :] = True
    mask[1, :] = False  # a fully masked row
    mask[2, :] = False
    mask[2, 3] = True  # a one-token sequence
    new = (lt + rng.normal(0, 0.15, (b, t))).astype(np.float32)
    adv = rng.normal(0, 1, b).astype(np.float32)
    ent = rng.uniform(0.1, 3.0, (b, t)).astype(np.float32)
    return {"lr": lr, "lt": lt, "mask": mask, "new": new, "adv": adv, "ent": ent}


def check(path: str, lr: np.ndarray, lt: np.ndarray, mask: np.ndarray | None = None) -> None:
    """Every metric of one step (no optional input) against the reference."""
    band = (reference(lr, lt, mask, margin=MARGIN), reference(lr, lt, mask, margin=-MARGIN))
    got = run(path, lr, lt, mask)
    want = reference(lr, lt, mask)
    assert set(got) == set(want) - {"buckets"}
    assert_close(got, want, allow=allowance(lr, lt, mask), band=band)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_metric_and_bucket_matches_the_reference(path: str, seed: int) -> None:
    x = make_inputs(seed)
    base = (x["lr"], x["lt"], x["mask"])
    got = summary(path, *base, new_logprobs=x["new"], advantages=x["adv"], entropy=x["ent"])
    given = {"new": x["new"], "adv": x["adv"], "ent": x["ent"]}
    want = reference(*base, **given)
    band = (reference(*base, **given, margin=MARGIN), reference(*base, **given, margin=-MARGIN))
    assert set(got.metrics) == set(want) - {"buckets"}
    assert_close(got.metrics, want, allow=allowance(*base, new=x["new"], ent=x["ent"]), band=band)
    (table,) = got.buckets
    assert table["basis"] == "rollout"
    assert table["edges"] == list(DEFAULT_EDGES)
    bands = (band[0]["buckets"], band[1]["buckets"])
    assert_buckets_close(table, want["buckets"], allow=bucket_allowance(*base), band=bands)


@pytest.mark.parametrize("path", PATHS)
def test_trainer_basis_buckets_match_the_reference_on_request(path: str) -> None:
    x = make_inputs(8)
    base = (x["lr"], x["lt"], x["mask"])
    got = summary(path, *base, trainer_buckets=True)
    assert [t["basis"] for t in got.buckets] == ["rollout", "trainer"]
    seqs = sequences(*base)
    want = bucket_table(seqs, "trainer")
    bands = (
        bucket_table(seqs, "trainer", margin=MARGIN),
        bucket_table(seqs, "trainer", margin=-MARGIN),
    )
    allow = bucket_allowance(*base, basis="trainer")
    assert_buckets_close(got.buckets[1], want, allow=allow, band=bands)


def test_padded_and_packed_layouts_give_the_same_numbers() -> None:
    x = make_inputs(4)
    mask = x["mask"]
    lens = mask.sum(axis=1)
    packed = {
        k: np.concatenate([x[k][i][mask[i]] for i in range(mask.shape[0])])
        for k in ("lr", "lt", "new")
    }
    padded = compute_step_metrics(
        x["lr"], x["lt"], mask, new_logprobs=x["new"], advantages=x["adv"]
    )
    flat = compute_step_metrics(
        packed["lr"], packed["lt"], seq_lens=lens, new_logprobs=packed["new"], advantages=x["adv"]
    )
    for name, value in padded.metrics.items():
        assert flat.metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    assert flat.buckets == padded.buckets


@pytest.mark.parametrize("path", [*PATHS, "pure"])
def test_large_log_ratio_is_clamped_before_exp(path: str) -> None:
    lr = np.array([[-60.0, -1.0, -0.5]], dtype=np.float32)
    lt = np.array([[-10.0, -1.0, -0.5]], dtype=np.float32)  # d = 50 on the first token
    got = run(path, lr, lt)
    assert got["abs_logp_diff_max"] == pytest.approx(50.0)
    assert got["ratio_max"] == pytest.approx(math.exp(20.0), rel=1e-6)
    assert got["k3_kl_max"] == pytest.approx(math.exp(20.0) - 21.0, rel=1e-6)
    assert all(math.isfinite(v) for v in got.values())
    if path != "pure":
        check(path, lr, lt)


@pytest.mark.parametrize("path", [*PATHS, "pure"])
def test_nan_input_propagates_and_is_counted(path: str) -> None:
    x = make_inputs(5)
    lr = x["lr"].copy()
    lr[0, 3] = np.nan
    got = run(path, lr, x["lt"], x["mask"])
    for name in ("k3_kl", "ratio_mean", "k3_kl_max", "ratio_min", "abs_logp_diff_max"):
        assert math.isnan(got[name]), name
    assert math.isnan(got["k1_kl_seq"])  # the NaN token's sequence is in the mean
    assert got["nonfinite_tokens"] == 1.0
    assert got["tokens"] == float(x["mask"].sum())
    if path != "pure":
        assert math.isnan(got["k3_kl_p99"])  # a NaN has no rank
        check(path, lr, x["lt"], x["mask"])


@pytest.mark.parametrize("path", PATHS)
def test_nan_in_padding_changes_nothing(path: str) -> None:
    x = make_inputs(9)
    clean = summary(path, x["lr"], x["lt"], x["mask"], new_logprobs=x["new"])
    lr, lt, new = x["lr"].copy(), x["lt"].copy(), x["new"].copy()
    padding = ~x["mask"]
    lr[padding], lt[padding], new[padding] = np.nan, np.inf, -np.inf
    dirty = summary(path, lr, lt, x["mask"], new_logprobs=new)
    assert dirty.metrics == clean.metrics
    assert dirty.buckets == clean.buckets


def test_per_token_and_per_sequence_advantages_agree() -> None:
    x = make_inputs(10)
    per_token = np.repeat(x["adv"][:, None], x["lr"].shape[1], axis=1)
    a = compute_step_metrics(
        x["lr"], x["lt"], x["mask"], new_logprobs=x["new"], advantages=x["adv"]
    )
    b = compute_step_metrics(
        x["lr"], x["lt"], x["mask"], new_logprobs=x["new"], advantages=per_token
    )
    assert a.metrics["clip_rate_low"] == b.metrics["clip_rate_low"] > 0
    assert a.metrics["clip_rate_high"] == b.metrics["clip_rate_high"] > 0


def test_bf16_inputs_match_the_reference_on_rounded_values() -> None:
    x = make_inputs(6, scale=0.05)
    lr = torch.from_numpy(x["lr"]).to(torch.bfloat16)
    lt = torch.from_numpy(x["lt"]).to(torch.bfloat16)
    got = compute_step_metrics(lr, lt, torch.from_numpy(x["mask"])).metrics
    lr32, lt32 = lr.float().numpy(), lt.float().numpy()
    want = reference(lr32, lt32, x["mask"])
    band = (
        reference(lr32, lt32, x["mask"], margin=MARGIN),
        reference(lr32, lt32, x["mask"], margin=-MARGIN),
    )
    assert_close(got, want, allow=allowance(lr32, lt32, x["mask"]), band=band)


@pytest.mark.parametrize("path", [*PATHS, "pure"])
def test_empty_step_reports_only_counts(path: str) -> None:
    lr = np.zeros((2, 3), dtype=np.float32)
    assert run(path, lr, lr, np.zeros((2, 3), dtype=bool)) == {"tokens": 0.0, "sequences": 0.0}
    assert compute_step_metrics(lr, lr, np.zeros((2, 3), dtype=bool)).buckets == []


@pytest.mark.parametrize("path", PATHS)
def test_one_token_sequences(path: str) -> None:
    lr = np.log(np.array([[0.5], [0.2], [0.9]], dtype=np.float32))
    lt = np.log(np.array([[0.6], [0.07], [0.9]], dtype=np.float32))
    check(path, lr, lt)


def test_identical_logprobs_mean_no_mismatch() -> None:
    x = make_inputs(7)
    got = compute_step_metrics(x["lr"], x["lr"], x["mask"]).metrics
    assert got["k3_kl"] == 0.0
    assert got["ratio_dev_1e4"] == 0.0
    assert got["rollout_clip_rate"] == 0.0
    assert got["ess_token"] == pytest.approx(1.0)


def test_bucket_sums_from_several_actors_add_to_the_union() -> None:
    parts = [make_inputs(s, b=3, t=30) for s in (10, 11, 12)]
    tables = [compute_step_metrics(p["lr"], p["lt"], p["mask"]).buckets[0] for p in parts]
    union = compute_step_metrics(
        np.concatenate([p["lr"] for p in parts]),
        np.concatenate([p["lt"] for p in parts]),
        np.concatenate([p["mask"] for p in parts]),
    ).buckets[0]
    (merged,) = merge_buckets(tables)
    for name in ("tokens", "sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3", "oob"):
        assert merged[name] == pytest.approx(union[name], rel=1e-5, abs=1e-5), name


def test_mismatched_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="differ in shape"):
        compute_step_metrics(np.zeros((2, 3)), np.zeros((2, 4)))
