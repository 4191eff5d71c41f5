"""compute_step_metrics against the independent float64 reference in reference.py."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from collectors import DEFAULT_EDGES, compute_step_metrics
from collectors._metrics import merge_buckets
from tests.collectors.reference import reference

# Values of order one are compared relatively; those that are differences of near-equal float32
# numbers (ratio_dev, chi2) get an absolute allowance on top.
RTOL = 2e-4
ATOL = {"ratio_dev_1e4": 0.05, "ratio_dev_1e4_seq": 0.05, "chi2_token": 1e-5, "chi2_seq": 1e-5}


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


def assert_matches(got: dict[str, float], want: dict[str, Any]) -> None:
    names = set(want) - {"buckets"}
    assert names <= set(got), sorted(names - set(got))
    for name in sorted(names):
        g, w = got[name], want[name]
        if math.isnan(w):
            assert math.isnan(g), name
            continue
        assert g == pytest.approx(w, rel=RTOL, abs=ATOL.get(name, 1e-6)), name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_metric_matches_the_reference(seed: int) -> None:
    x = make_inputs(seed)
    got = compute_step_metrics(
        x["lr"], x["lt"], x["mask"], new_logprobs=x["new"], advantages=x["adv"], entropy=x["ent"]
    )
    want = reference(x["lr"], x["lt"], x["mask"], new=x["new"], adv=x["adv"], ent=x["ent"])
    assert_matches(got.metrics, want)
    table = got.buckets[0]
    assert table["edges"] == list(DEFAULT_EDGES)
    for name, values in want["buckets"].items():
        assert table[name] == pytest.approx(values, rel=RTOL, abs=1e-4), name


def test_torch_and_numpy_inputs_agree() -> None:
    x = make_inputs(3)
    as_np = compute_step_metrics(
        x["lr"], x["lt"], x["mask"], new_logprobs=x["new"], advantages=x["adv"]
    )
    t = {k: torch.from_numpy(v) for k, v in x.items()}
    as_torch = compute_step_metrics(
        t["lr"], t["lt"], t["mask"], new_logprobs=t["new"], advantages=t["adv"]
    )
    assert set(as_np.metrics) == set(as_torch.metrics)
    for name, value in as_np.metrics.items():
        assert as_torch.metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name


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


def test_large_log_ratio_is_clamped_before_exp() -> None:
    lr = np.array([[-60.0, -1.0, -0.5]], dtype=np.float32)
    lt = np.array([[-10.0, -1.0, -0.5]], dtype=np.float32)  # d = 50 on the first token
    got = compute_step_metrics(lr, lt).metrics
    want = reference(lr, lt)
    assert_matches(got, want)
    assert got["abs_logp_diff_max"] == pytest.approx(50.0)
    assert got["ratio_max"] == pytest.approx(math.exp(20.0), rel=1e-5)
    assert all(math.isfinite(v) for v in got.values())


def test_nan_input_propagates_and_is_counted() -> None:
    x = make_inputs(5)
    lr = x["lr"].copy()
    lr[0, 3] = np.nan
    got = compute_step_metrics(lr, x["lt"], x["mask"]).metrics
    assert math.isnan(got["k3_kl"])
    assert math.isnan(got["ratio_mean"])
    assert got["nonfinite_tokens"] == 1.0
    assert got["tokens"] == float(x["mask"].sum())


def test_nan_in_padding_changes_nothing() -> None:
    x = make_inputs(9)
    clean = compute_step_metrics(x["lr"], x["lt"], x["mask"], new_logprobs=x["new"])
    lr, lt, new = x["lr"].copy(), x["lt"].copy(), x["new"].copy()
    padding = ~x["mask"]
    lr[padding], lt[padding], new[padding] = np.nan, np.inf, -np.inf
    dirty = compute_step_metrics(lr, lt, x["mask"], new_logprobs=new)
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
    want = reference(lr.float().numpy(), lt.float().numpy(), x["mask"])
    assert_matches(got, want)


def test_empty_step_reports_only_counts() -> None:
    lr = np.zeros((2, 3), dtype=np.float32)
    got = compute_step_metrics(lr, lr, np.zeros((2, 3), dtype=bool))
    assert got.metrics == {"tokens": 0.0, "sequences": 0.0}
    assert got.buckets == []


def test_one_token_sequences() -> None:
    lr = np.log(np.array([[0.5], [0.2], [0.9]], dtype=np.float32))
    lt = np.log(np.array([[0.6], [0.07], [0.9]], dtype=np.float32))
    assert_matches(compute_step_metrics(lr, lt).metrics, reference(lr, lt))


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


def test_trainer_basis_buckets_on_request() -> None:
    x = make_inputs(8)
    got = compute_step_metrics(x["lr"], x["lt"], x["mask"], trainer_buckets=True)
    assert [t["basis"] for t in got.buckets] == ["rollout", "trainer"]
    assert sum(got.buckets[1]["tokens"]) == float(x["mask"].sum())


def test_mismatched_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="differ in shape"):
        compute_step_metrics(np.zeros((2, 3)), np.zeros((2, 4)))
