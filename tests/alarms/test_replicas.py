"""Two server replicas on one PostgreSQL database evaluate one run's alarms as one server would.

A load balancer sends consecutive batches of a run to different replicas; a rule that needs three
consecutive breaching steps must still see all three, and the alert must resolve on whichever
replica sees the recovery.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import fresh_pg_database
from tests.factories import record, run_upsert

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def k3(step: int) -> float:
    return 0.5 if 35 <= step < 40 else 1e-3


def test_alternating_replicas_share_alarm_state(server_factory: Any, postgres_url: str) -> None:
    url = fresh_pg_database(postgres_url)
    first = server_factory(url)
    assert first.post("/api/v1/ingest", {"run": run_upsert("lb")}).status_code == 200
    # Started after the first has migrated the database and given the new project its default
    # rules: it reads them when it starts, without waiting for its periodic reload.
    second = server_factory(url)
    replicas = (first, second)
    for step in range(45):
        body = {"records": [record("lb", step, {"k3_kl": k3(step)})]}
        response = replicas[step % 2].post("/api/v1/ingest", body)
        assert response.status_code == 200, response.text

    alerts = first.query("/api/v1/alerts?run=lb")["data"]
    high = [a for a in alerts if a["rule_name"] == "vllm-kl high"]
    # One alert, opened at the fifth high step in a row, resolved at the third normal one,
    # although each replica saw only every other step.
    assert [(a["step"], a["state"], a["resolved_step"]) for a in high] == [(39, "resolved", 42)]
    spike = [a for a in alerts if a["rule_name"] == "vllm-kl spike"]
    assert len(spike) == 1
    # Recorded by either replica, the run's alerts are one incident, headed by the first.
    assert {a["incident_id"] for a in alerts} == {min(alerts, key=lambda a: a["step"])["id"]}
