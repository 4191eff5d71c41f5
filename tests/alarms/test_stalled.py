"""The stalled-run rule: fires once when a live run goes quiet, resolves when it speaks again —
also when replicas on one PostgreSQL database take turns checking."""

from __future__ import annotations

import time
from typing import Any

from server.alarms.service import AlarmService
from server.alarms.store import AlarmStore
from server.domain.alarms import RunActivity
from server.storage.db import Database


def _run(last_seen: float, status: str = "running") -> RunActivity:
    return RunActivity(
        id="quiet", project="p", labels={}, status=status, last_seen=last_seen, last_step=7
    )


def _stalled(service: AlarmService) -> list[tuple[Any, ...]]:
    return [
        (a.step, a.state, a.value > 300)
        for a in service.store.alerts(run_id="quiet")
        if a.rule_name == "stalled run"
    ]


def test_stalled_fires_once_and_resolves(migrated_db: Database) -> None:
    db = migrated_db
    first = AlarmService(AlarmStore(db), base_url="http://monitor")
    first.ensure_defaults("p")
    # A second replica: on PostgreSQL it shares the states; on DuckDB it is the same process.
    other = AlarmService(AlarmStore(db), base_url="http://monitor") if first.turns.shared else first
    now = time.time()

    first.check_stalled([_run(now - 30)], now=now)
    assert _stalled(first) == []
    first.check_stalled([_run(now - 400)], now=now + 1)
    other.check_stalled([_run(now - 400)], now=now + 3)
    assert _stalled(first) == [(7, "firing", True)]
    other.check_stalled([_run(now + 6)], now=now + 7)
    assert _stalled(first) == [(7, "resolved", True)]


def test_a_run_that_says_it_ended_is_never_stalled(migrated_db: Database) -> None:
    service = AlarmService(AlarmStore(migrated_db), base_url="http://monitor")
    service.ensure_defaults("p")
    now = time.time()
    for status in ("finished", "failed"):
        service.check_stalled([_run(now - 400, status=status)], now=now)
    assert _stalled(service) == []


def test_a_stalled_run_that_then_ends_resolves_its_alert(migrated_db: Database) -> None:
    service = AlarmService(AlarmStore(migrated_db), base_url="http://monitor")
    service.ensure_defaults("p")
    now = time.time()
    service.check_stalled([_run(now - 400)], now=now)
    assert _stalled(service) == [(7, "firing", True)]
    # the hung trainer finally closed its run: its end touched the run a moment ago
    service.check_stalled([_run(now + 1, status="finished")], now=now + 2)
    assert [state for _, state, _ in _stalled(service)] == ["resolved"]
