"""Attribution over HTTP on a real server, for the fingerprints the real vLLM engine on a CPU
leaves (`benchmarks/attribution_engine.py`), on hand-made runs whose answer is known by
construction: a steep bucket slope, a bf16-sized level above the project's fp32 reference
run, a prefix cache kept across every weight update, a lag that alternates, and a healthy run
beside its reference. The runs carry no config: the metrics alone decide."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from tests import web
from tests.factories import record

STEPS = 20
FLOOR = 2e-13  # k3 of an fp32 engine against an fp32 trainer
EDGES = [0.0, 1e-4, 1e-3, 1e-2, 1e-1, 0.5, 0.9, 1.0]


@pytest.fixture
def server(server_factory: Any, db_url: str) -> Any:
    return server_factory(db_url)


def _noisy(level: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [level * math.exp(0.3 * rng.gauss(0, 1)) for _ in range(STEPS)]


def _k1(k3: list[float], seed: int) -> list[float]:
    """k1 of a pair of normalised distributions: k3's KL with sampling noise of both signs."""
    rng = random.Random(seed)
    return [v * (1 + 0.1 * rng.gauss(0, 1)) for v in k3]


def _buckets(per_token_k3: list[float], tokens: float = 200.0) -> dict[str, Any]:
    return {
        "basis": "rollout",
        "edges": EDGES,
        "tokens": [tokens] * 7,
        "sum_d": [0.0] * 7,
        "sum_abs_d": [tokens * math.sqrt(2 * k) for k in per_token_k3],
        "sum_k3": [tokens * k for k in per_token_k3],
        "sum_reverse_k3": [tokens * k for k in per_token_k3],
        "oob": [0] * 7,
    }


def _ingest(server: Any, run_id: str, k3: list[float], **per_step: list[float]) -> None:
    """A run without a config: the trainer's k3/k1 (with `k3_kl_p99` and per-token bucket k3,
    `bucket_k3`, when given), the rollout side's lag, weight version and cache hit rate."""
    bucket_k3 = per_step.pop("bucket_k3", None)
    k1 = per_step.pop("k1", _k1(k3, seed=len(run_id)))
    p99 = per_step.pop("k3_kl_p99", None)
    records = []
    for s in range(STEPS):
        extra = {"buckets": [_buckets(bucket_k3)]} if bucket_k3 else {}
        trainer = {"k3_kl": k3[s], "k1_kl": k1[s]} | ({"k3_kl_p99": p99[s]} if p99 else {})
        records.append(record(run_id, s, trainer, **extra))
        rollout = {name: values[s] for name, values in per_step.items()}
        if rollout:
            records.append(record(run_id, s, rollout, source="rollout", actor="vllm-0"))
    body = {"run": {"id": run_id, "project": "fp"}, "records": records}
    response = server.post("/api/v1/ingest", body)
    assert response.status_code == 200, response.text


def _attribution(server: Any, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = server.query(f"/api/v1/runs/{run_id}/attribution?project=fp")
    assert found["steps"] == STEPS
    return found


def _checks(found: dict[str, Any]) -> dict[str, Any]:
    return {c["name"]: c for c in found["checks"]}


def _set_reference(server: Any, run_id: str) -> None:
    put = web.put(f"{server.url}/api/v1/projects/fp/reference", json={"run": run_id}, timeout=30)
    assert put.status_code == 200, put.text


def test_steep_bucket_slope_above_healthy_is_attributed_to_the_head(server: Any) -> None:
    # per-token k3 ×10 per decade as p → 0 (slope 1), on a steady level above 1e-3
    tail = [3e-1, 1e-1, 1e-2, 1e-3, 1e-4, 2e-5, 5e-6]
    _ingest(server, "steep", _noisy(5e-3, seed=1), bucket_k3=tail)
    found = _attribution(server, "steep")
    checks = _checks(found)
    assert checks["bucket_slope"]["passed"] is True
    assert checks["bucket_slope"]["figure"] == pytest.approx(1.0, abs=0.2)
    assert checks["mean_offset"]["passed"] is False
    assert found["top"]["mode"] == "head_precision"
    assert "low-probability tail" in found["top"]["evidence"][0]


def test_bf16_sized_level_reads_head_above_an_fp32_reference_and_normal_without(
    server: Any,
) -> None:
    flat = [5e-5] * 6 + [1e-7]  # flat below p 0.9, as the real engine's bf16 head leaves it
    _ingest(server, "bf16-head", _noisy(5e-5, seed=2), bucket_k3=flat)
    alone = _attribution(server, "bf16-head")
    assert alone["top"]["mode"] == "normal_noise"  # the field's bound: a bf16 engine's level
    hint = next(h for h in alone["hypotheses"] if h["mode"] == "head_precision")
    assert 0 < hint["score"] < alone["top"]["score"]

    _ingest(server, "parity", _noisy(FLOOR, seed=3))
    _set_reference(server, "parity")
    found = _attribution(server, "bf16-head")
    checks = _checks(found)
    assert checks["level"]["passed"] is False
    assert checks["level"]["threshold"] == pytest.approx(10 * _reference_level(server))
    assert checks["precision_size"]["passed"] is True
    assert checks["bucket_slope"]["passed"] is False  # not steep: the size decides
    assert found["top"]["mode"] == "head_precision"
    assert "bf16 rounding" in found["top"]["evidence"][0]


def _reference_level(server: Any) -> float:
    """The reference run's median k3, read back as stored (independent of attribution)."""
    series = server.query("/api/v1/runs/parity/series?metric=k3_kl&project=fp")
    values = sorted(p["mean"] for p in series["points"])
    return float((values[9] + values[10]) / 2)


def test_healthy_run_beside_its_reference_is_normal_noise(server: Any) -> None:
    _ingest(server, "parity", _noisy(FLOOR, seed=4))
    _set_reference(server, "parity")
    _ingest(server, "parity-2", _noisy(1.5 * FLOOR, seed=5), prefix_cache_hit_rate=[0.8] * STEPS)
    found = _attribution(server, "parity-2")
    assert found["top"]["mode"] == "normal_noise"
    assert "reference run parity" in found["top"]["evidence"][0]
    assert [h["score"] for h in found["hypotheses"][1:]] == [0.0] * (len(found["hypotheses"]) - 1)


def test_prefix_cache_kept_across_every_update_is_stale_state(server: Any) -> None:
    # weights pushed after every step, the cache never reset: from the first push on, every
    # step reuses prompt state of older weights, and the gap grows as the weights move away
    k3 = [FLOOR] + [0.02 * (1 + s / 5) for s in range(1, STEPS)]
    _ingest(server, "kept", k3, weight_version=[float(s) for s in range(STEPS)],
            lag=[0.0] * STEPS, prefix_cache_hit_rate=[0.83] * STEPS)  # fmt: skip
    found = _attribution(server, "kept")
    checks = _checks(found)
    assert checks["update_jump"]["passed"] is None  # every step follows an update
    assert checks["update_onset"]["passed"] is True
    assert checks["update_onset"]["figure"] == pytest.approx(1.0)
    assert checks["lag_tracking"]["passed"] is False
    assert found["top"]["mode"] == "stale_state"
    assert found["top"]["evidence"][1] == "prefix cache hit rate up to 83%"


def test_lag_of_weights_pushed_every_other_step_is_off_policy(server: Any) -> None:
    lag = [float(s % 2) for s in range(STEPS)]
    k3 = [0.03 if lagging else FLOOR for lagging in lag]
    _ingest(server, "push2", k3, weight_version=[float(s - s % 2) for s in range(STEPS)], lag=lag)
    found = _attribution(server, "push2")
    checks = _checks(found)
    assert checks["lag_tracking"]["passed"] is True
    assert checks["update_onset"]["passed"] is False  # the steps on current weights agree
    assert found["top"]["mode"] == "off_policy_lag"


def test_gap_carried_by_few_tokens_is_a_sampler_only_penalty(server: Any) -> None:
    # no offset (both sides normalised), but the 99th-percentile token sits 25× the mean where a
    # gap spread over the tokens (a chi-square of one degree of freedom) leaves 6.6×
    k3 = _noisy(1e-2, seed=6)
    _ingest(server, "penalty", k3, k3_kl_p99=[25 * v for v in k3])
    found = _attribution(server, "penalty")
    checks = _checks(found)
    assert checks["mean_offset"]["passed"] is False
    assert checks["token_concentration"]["passed"] is True
    assert checks["token_concentration"]["figure"] == pytest.approx(25.0)
    assert found["top"]["mode"] == "sampler_offset"
    assert "a few tokens carry the mismatch" in found["top"]["evidence"][0]
