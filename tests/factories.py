"""Builders of ingest payloads for tests and benchmarks."""

from __future__ import annotations

import math
from typing import Any

from server.domain.records import Batch
from server.schemas.batches import to_batch
from server.schemas.ingest import IngestIn


def run_upsert(run_id: str, *, project: str = "default", **extra: Any) -> dict[str, Any]:
    return {"id": run_id, "project": project, **extra}


def record(
    run_id: str,
    step: int,
    metrics: dict[str, Any],
    *,
    source: str = "trainer",
    actor: str = "trainer-0",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "step": step,
        "source": source,
        "actor": actor,
        "metrics": metrics,
        **extra,
    }


def batch(
    run_id: str,
    steps: range,
    *,
    metrics: int = 4,
    project: str = "default",
    with_run: bool = True,
    actor: str = "trainer-0",
    source: str = "trainer",
    value: Any = None,
) -> dict[str, Any]:
    """A batch of `len(steps)` records with `metrics` values each (k3_kl plus m1, m2, …)."""
    records = []
    for step in steps:
        values = {"k3_kl": value if value is not None else 1e-3 + step * 1e-6}
        for i in range(1, metrics):
            values[f"m{i}"] = float(step * i)
        records.append(record(run_id, step, values, actor=actor, source=source))
    body: dict[str, Any] = {"records": records}
    if with_run:
        body["run"] = run_upsert(run_id, project=project)
    return body


def ingest_batch(body: dict[str, Any]) -> Batch:
    """A payload (as the builders here make it) as the ingest service takes it: validated by
    the contract's models and mapped onto the domain, as the ingest route does."""
    return to_batch(IngestIn.model_validate(body))


def bucket_table(tokens: list[float], *, basis: str = "rollout") -> dict[str, Any]:
    edges = [0.0, 1e-4, 1e-3, 1e-2, 1e-1, 0.5, 0.9, 1.0][: len(tokens) + 1]
    return {
        "basis": basis,
        "edges": edges,
        "tokens": tokens,
        "sum_d": [t * 0.01 for t in tokens],
        "sum_abs_d": [t * 0.02 for t in tokens],
        "sum_k3": [t * 0.001 for t in tokens],
        "sum_reverse_k3": [t * 0.0011 for t in tokens],
        "oob": [math.floor(t / 10) for t in tokens],
    }


BUCKET_EDGES = [0.0, 1e-4, 1e-3, 1e-2, 1e-1, 0.5, 0.9, 1.0]
"""METRICS.md's default probability-bucket edges on pR = exp(lR)."""


def synthetic_tokens(
    n: int, *, seed: int = 0, offset: float = 0.0, noise: float = 1e-3
) -> tuple[list[float], list[float]]:
    """(rollout, trainer) logprobs of `n` sampled tokens as an engine and a trainer give them:
    most tokens near p = 1 and near parity, a tail of low-probability tokens whose gap grows as
    p → 0 (the write-ups' figure); `offset` shifts every trainer logprob (what raw logprobs at a
    temperature other than 1 do), `noise` scales the gap (a bf16 head widens it)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    # A mixture: 85 % confident tokens (p > 0.5), 15 % spread down to p ≈ 1e-6.
    confident = rng.random(n) < 0.85
    lr = np.where(confident, -rng.exponential(0.08, n), -rng.uniform(0.5, 14.0, n))
    lr = np.minimum(lr, -1e-6)
    scale = noise * np.exp(0.45 * -lr)  # the gap grows as the sampler's p falls
    lt = np.minimum(lr + offset + rng.normal(0.0, 1.0, n) * scale, 0.0)
    return lr.tolist(), lt.tolist()


def parity_report(
    run_id: str,
    *,
    project: str = "default",
    vllm: str = "0.32.0",
    logprobs_mode: str = "processed_logprobs",
    head_dtype: str = "fp32",
    temperature: float = 1.0,
    tokens: int = 4096,
    sequences: int = 16,
    top: int = 64,
    uniform: int = 64,
    seed: int = 0,
    offset: float = 0.0,
    noise: float = 1e-3,
) -> dict[str, Any]:
    """An ingest batch that follows the parity-report contract: a run of kind "parity" with the
    engine config, one trainer record at step 0 with the canonical metrics of its tokens, their
    probability-bucket sums and token exemplars (the `top` largest |d| and a uniform sample)."""
    import numpy as np

    lr_list, lt_list = synthetic_tokens(tokens, seed=seed, offset=offset, noise=noise)
    lr, lt = np.asarray(lr_list), np.asarray(lt_list)
    d = lt - lr
    r = np.exp(np.clip(d, -20, 20))
    k3 = r - 1 - d
    metrics = {
        "k1_kl": float(np.mean(-d)),
        "k3_kl": float(np.mean(k3)),
        "k3_kl_max": float(np.max(k3)),
        "reverse_k3_kl": float(np.mean(np.exp(-d) - 1 + d)),
        "ratio_dev_1e4": float((np.mean(r) - 1) * 1e4),
        "abs_logp_diff_mean": float(np.mean(np.abs(d))),
        "mult_prob_error": float(np.mean(np.exp(np.abs(d)))),
    }
    p = np.exp(lr)
    idx = np.clip(np.searchsorted(BUCKET_EDGES, p, side="right") - 1, 0, len(BUCKET_EDGES) - 2)
    nb = len(BUCKET_EDGES) - 1
    table = {
        "basis": "rollout",
        "edges": BUCKET_EDGES,
        "tokens": np.bincount(idx, minlength=nb).astype(float).tolist(),
        "sum_d": np.bincount(idx, d, minlength=nb).tolist(),
        "sum_abs_d": np.bincount(idx, np.abs(d), minlength=nb).tolist(),
        "sum_k3": np.bincount(idx, k3, minlength=nb).tolist(),
        "sum_reverse_k3": np.bincount(idx, np.exp(-d) - 1 + d, minlength=nb).tolist(),
        "oob": np.bincount(idx, (r < 0.5) | (r > 2.0), minlength=nb).astype(float).tolist(),
    }
    per_seq = -(-tokens // sequences)
    rng = np.random.default_rng(seed + 1)
    worst = np.argsort(-np.abs(d), kind="stable")[:top]
    sample = rng.choice(tokens, size=min(uniform, tokens), replace=False)
    exemplars = [
        {
            "kind": kind,
            "seq": int(i) // per_seq,
            "pos": int(i) % per_seq,
            "rollout_logprob": float(lr[i]),
            "trainer_logprob": float(lt[i]),
            "token_id": int(i) % 32000,
            "token": f"tok{int(i)}",
            "context": f"… context before token {int(i)}",
        }
        for kind, chosen in (("top", worst), ("uniform", sample))
        for i in chosen
    ]
    engine = {
        "name": "vllm",
        "version": vllm,
        "logprobs_mode": logprobs_mode,
        "enable_prefix_caching": True,
        "async_scheduling": False,
        "enforce_eager": True,
        "enable_chunked_prefill": True,
        "head_dtype": head_dtype,
        "dtype": "bfloat16",
        "temperature": temperature,
        "top_p": 1.0,
        "top_k": -1,
    }
    return {
        "run": run_upsert(
            run_id,
            project=project,
            kind="parity",
            labels={"vllm": vllm, "gpu": "cpu", "logprobs_mode": logprobs_mode},
            config={
                "engine": engine,
                "trainer": {"dtype": "float32"},
                "parity": {"prompts": sequences, "tokens": tokens, "weight_update": None},
            },
        ),
        "records": [
            record(
                run_id,
                0,
                metrics,
                actor="parity",
                gpu="cpu",
                buckets=[table],
                exemplars=exemplars,
            )
        ],
        "annotations": [
            {
                "id": f"{run_id}-phase-0",
                "run_id": run_id,
                "step": 0,
                "kind": "parity_phase",
                "text": "sampling",
            }
        ],
    }
