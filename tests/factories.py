"""Builders of ingest payloads for tests and benchmarks."""

from __future__ import annotations

import math
from typing import Any


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
