"""A notification tells the truth of its moment, through a real server and a real receiver: for a
short spike whose firing and end are recorded together, each receiver hears the firing first, a
firing message says firing, and its likely cause names the spike rather than "normal noise"."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.alarms.test_webhooks import LOCAL_RECEIVERS, Receiver, k3_batch
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

RUNS = 20
BASE = 300  # healthy steps before the spike: the run's own history
SPIKE = range(BASE, BASE + 10)  # ×1000 for 10 steps


def _healthy(step: int) -> float:
    return 1e-3 * (1 + 0.2 * math.sin(step))


def _spiked(step: int) -> float:
    return _healthy(step) * 1000 if step in SPIKE else _healthy(step)


def test_a_short_spike_is_told_firing_first_with_its_cause_every_time(
    server_factory: Any,
) -> None:
    receiver = Receiver()
    try:
        server = server_factory(args=LOCAL_RECEIVERS)
        runs = [f"spiky-{i}" for i in range(RUNS)]
        for run in runs:
            healthy = k3_batch(run, range(BASE), _healthy, with_run=True)
            assert server.post("/api/v1/ingest", healthy).status_code == 200
        made = server.post("/api/v1/receivers", {"project": "p", "url": receiver.url})
        assert made.status_code == 201, made.text
        for run in runs:
            # the spike and its end in one batch: fired and resolved in one recording round
            spike = k3_batch(run, range(BASE, BASE + 40), _spiked)
            assert server.post("/api/v1/ingest", spike).status_code == 200

        def told(run: str) -> list[dict[str, Any]]:
            return [p for _, p in receiver.delivered() if p.get("run") == run]

        assert wait_for(
            lambda: all(
                {p["type"] for p in told(run)} >= {"alert.firing", "alert.resolved"} for run in runs
            ),
            120,
            message="every run's spike was not told and ended",
        )
        for run in runs:
            kinds = [p["type"] for p in told(run)]
            assert kinds.index("alert.firing") < kinds.index("alert.resolved"), (run, kinds)
            firing = next(p for p in told(run) if p["type"] == "alert.firing")
            assert firing["state"] == "firing", run
            assert firing["step"] in SPIKE
            cause = (firing.get("diagnosis") or {}).get("likely_cause", "")
            assert cause, f"{run}: the firing message names no likely cause"
            assert "normal noise" not in cause, cause
            assert "excursion" in cause, cause
    finally:
        receiver.close()
