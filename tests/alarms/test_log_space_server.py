"""The default pack on a real server, fed like the first report of false alarms: a healthy
10,000-step run with log-normal k3 noise (σ = 0.6 in log space) and a slow ×2 drift raises
nothing, and the same run's ×20 rise of vllm-kl fires the k3 rules."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.factories import record, run_upsert

pytestmark = pytest.mark.slow

HEALTHY = 10_000
RUN = "lognormal"


def _healthy(rng: np.random.Generator) -> dict[str, np.ndarray]:
    drift = np.exp(np.log(2.0) * np.linspace(0.0, 1.0, HEALTHY))
    return {
        "k3_kl": 1e-3 * drift * np.exp(0.6 * rng.standard_normal(HEALTHY)),
        "grad_norm": 0.5 * np.exp(0.2 * rng.standard_normal(HEALTHY)),
        "entropy": 0.8 * np.exp(0.05 * rng.standard_normal(HEALTHY)),
    }


def _send(server: Any, start: int, columns: dict[str, np.ndarray], *, first: bool) -> None:
    steps = len(next(iter(columns.values())))
    for lo in range(0, steps, 500):
        records = [
            record(RUN, start + i, {name: float(v[i]) for name, v in columns.items()})
            for i in range(lo, min(steps, lo + 500))
        ]
        body: dict[str, Any] = {"records": records}
        if first and lo == 0:
            body["run"] = run_upsert(RUN, project="quality")
        response = server.post("/api/v1/ingest", body)
        assert response.status_code == 200, response.text


def test_healthy_lognormal_run_is_quiet_and_a_20x_rise_fires(server_factory: Any) -> None:
    server = server_factory()
    rng = np.random.default_rng(20)
    healthy = _healthy(rng)
    _send(server, 0, healthy, first=True)
    assert server.query(f"/api/v1/alerts?run={RUN}")["data"] == []

    level = float(np.median(healthy["k3_kl"][-100:]))
    ramp = np.minimum(1.0, np.arange(1, 41) / 15)  # ×20 over 15 steps, then held
    rise = {
        "k3_kl": level * 20**ramp * np.exp(0.6 * rng.standard_normal(40)),
        "grad_norm": 0.5 * np.exp(0.2 * rng.standard_normal(40)),
        "entropy": 0.8 * np.exp(0.05 * rng.standard_normal(40)),
    }
    _send(server, HEALTHY, rise, first=False)
    alerts = server.query(f"/api/v1/alerts?run={RUN}")["data"]
    fired = {a["rule_name"]: a["step"] for a in alerts}
    assert "vllm-kl spike" in fired and "vllm-kl rise" in fired
    assert all(HEALTHY <= step < HEALTHY + 40 for step in fired.values())
