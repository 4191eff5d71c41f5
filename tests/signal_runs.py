"""Runs logged in other trainers' names, posted through the public ingest API: TRL (mean |logp
diff| and its sequence-level importance ratio), slime (sequence means), and a run with only
the training-side metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TRL = {"abs_logp_diff_mean": 0.27, "ratio_mean@trl": 0.98, "entropy": 1.1}
SLIME = {"k3_kl_seq": 2e-3, "abs_logp_diff_mean_seq": 0.05, "ratio_dev_1e4_seq": 12.0}
K3 = {"k3_kl": 1e-3, "reverse_k3_kl": 9e-4, "entropy": 1.2}
PLAIN = {"entropy": 1.0, "reward_mean": 0.5}


def body(
    run_id: str,
    metrics: dict[str, float],
    *,
    steps: int = 30,
    name: str | None = None,
    project: str = "signals",
    gpu: str = "NVIDIA H100 80GB HBM3",
    scale: Callable[[int], float] = lambda step: 1.0,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An ingest batch: the run, and `steps` trainer records of `metrics` (each value times
    `scale(step)`)."""
    records = [
        {
            "run_id": run_id,
            "step": step,
            "source": "trainer",
            "actor": "trainer-0",
            "gpu": gpu,
            "time": 1.7e9 + step * 10,
            "metrics": {k: v * scale(step) for k, v in metrics.items()},
        }
        for step in range(steps)
    ]
    run = {"id": run_id, "name": name or run_id, "project": project, **(extra or {})}
    return {"run": run, "records": records}


def post(server: Any, *bodies: dict[str, Any]) -> None:
    for b in bodies:
        response = server.post("/api/v1/ingest", b)
        assert response.status_code == 200, response.text
