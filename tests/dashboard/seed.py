"""Seeded runs for the dashboard tests: a V0-like reference, V1 before and after fixes, runs on
two GPU types, a run whose name is markup, posted through the public ingest API."""

from __future__ import annotations

import math
import random
from typing import Any

EDGES = [0.0, 1e-4, 1e-3, 1e-2, 1e-1, 0.5, 0.9, 1.0]
DIVERGE_AT = 40
XSS_NAME = "<img src=x onerror=alert(1)>"


def buckets(scale: float) -> list[dict[str, Any]]:
    tokens = [5.0, 10.0, 20.0, 40.0, 80.0, 200.0, 400.0]
    k3 = [t * scale * (8.0 / (i + 1)) for i, t in enumerate(tokens)]
    return [
        {
            "basis": "rollout",
            "edges": EDGES,
            "tokens": tokens,
            "sum_d": [v * 0.5 for v in k3],
            "sum_abs_d": [v * 2 for v in k3],
            "sum_k3": k3,
            "sum_reverse_k3": k3,
            "oob": [t * min(1.0, scale * 10) for t in tokens],
        }
    ]


def run_body(
    run_id: str,
    name: str,
    config: dict[str, Any],
    gpu: str,
    *,
    steps: int,
    k3: Any,
    ratio_dev: Any,
    clip: float,
    project: str = "vllm-migration",
    start: int = 0,
) -> dict[str, Any]:
    rng = random.Random(run_id)
    records = []
    for step in range(start, start + steps):
        noise = 1 + 0.05 * rng.uniform(-1, 1)
        value = k3(step) * noise
        records.append(
            {
                "run_id": run_id,
                "step": step,
                "source": "trainer",
                "actor": "trainer-0",
                "gpu": gpu,
                "time": 1.7e9 + step * 10,
                "metrics": {
                    "k3_kl": value,
                    "reverse_k3_kl": value * 0.9,
                    "ratio_dev_1e4": ratio_dev(step),
                    "ratio_abs_dev": 0.01,
                    "rollout_clip_rate": clip,
                    "entropy": 1.2 - step * 1e-3,
                    "reward_mean": 0.2 + step * 2e-3,
                    "grad_norm": 1.0,
                },
                "buckets": buckets(value),
            }
        )
        records.append(
            {
                "run_id": run_id,
                "step": step,
                "source": "rollout",
                "actor": "rollout-0",
                "gpu": gpu,
                "time": 1.7e9 + step * 10,
                "metrics": {"prefix_cache_hit_rate": 0.0, "lag": 0.0},
            }
        )
    return {
        "run": {
            "id": run_id,
            "name": name,
            "project": project,
            "labels": {"engine": config["engine"]["version"]},
            "config": config,
        },
        "records": records,
        "annotations": [
            {
                "id": f"{run_id}-w",
                "run_id": run_id,
                "step": 10 + start,
                "kind": "weight_update",
                "text": "weight update v1 → v2",
            }
        ],
    }


def engine(version: str, mode: str, prefix: bool, head: str) -> dict[str, Any]:
    return {
        "engine": {
            "engine": "vllm",
            "version": version,
            "logprobs_mode": mode,
            "enable_prefix_caching": prefix,
            "async_scheduling": False,
            "head_dtype": head,
            "sampling": {"temperature": 0.7, "top_p": 1.0},
        },
        "objective": "GSPO",
    }


def seed(server: Any, steps: int = 80) -> dict[str, str]:
    reference = lambda s: 1e-3  # noqa: E731
    before = lambda s: 1e-3 if s < DIVERGE_AT else 2e-2  # noqa: E731
    bodies = [
        run_body(
            "v0-ref",
            "V0 reference",
            engine("0.8.5", "processed_logprobs", False, "float32"),
            "NVIDIA H20",
            steps=steps,
            k3=reference,
            ratio_dev=lambda s: 0.5,
            clip=0.01,
        ),
        run_body(
            "v1-before",
            "V1 before fixes",
            engine("0.18.1", "raw_logprobs", True, "bfloat16"),
            "NVIDIA H20",
            steps=steps,
            k3=before,
            ratio_dev=lambda s: 0.5 if s < DIVERGE_AT else 250.0,
            clip=0.06,
        ),
        run_body(
            "v1-after",
            "V1 after fixes",
            engine("0.18.1", "processed_logprobs", False, "float32"),
            "NVIDIA H20",
            steps=steps,
            k3=reference,
            ratio_dev=lambda s: 0.6,
            clip=0.011,
        ),
        run_body(
            "a100-run",
            "A100 run",
            engine("0.18.1", "processed_logprobs", False, "float32"),
            "NVIDIA A100-SXM4-80GB",
            steps=steps,
            k3=lambda s: 5e-2,
            ratio_dev=lambda s: 3.0,
            clip=0.2,
        ),
        run_body(
            "xss-run",
            XSS_NAME,
            engine("0.18.1", "processed_logprobs", False, "float32"),
            "NVIDIA H20",
            steps=5,
            k3=reference,
            ratio_dev=lambda s: 0.0,
            clip=0.0,
        ),
    ]
    for body in bodies:
        response = server.post("/api/v1/ingest", body)
        assert response.status_code == 200, response.text
    nan_body = {
        "records": [
            {
                "run_id": "v1-before",
                "step": steps,
                "source": "trainer",
                "actor": "trainer-0",
                "gpu": "NVIDIA H20",
                "metrics": {"k3_kl": math.nan, "grad_norm": math.inf},
            }
        ]
    }
    assert server.post("/api/v1/ingest", nan_body).status_code == 200
    return {b["run"]["id"]: b["run"]["name"] for b in bodies}
