""" "No data" is not "non-finite": an alert whose series stops reporting ends as no data, while a
series that reports NaN is still reporting — the NaN neither resolves its alerts nor makes them
"no data"."""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

import pytest

from server.alarms.evaluating.evaluation import Evaluator
from server.alarms.service import AlarmService
from server.alarms.store import AlarmStore
from server.domain.alarms import Fired, Rule
from server.domain.records import StoredRecord, WriteResult
from tests.alarms.test_webhooks import LOCAL_RECEIVERS, Receiver
from tests.factories import record, run_upsert
from tests.waiting import wait_for

HIGH = {"threshold": 0.1, "direction": "above", "for_steps": 1, "no_data_s": 60}
HIGH_RULE = Rule(id="r", project="p", name="high", kind="threshold", metric="k3_kl", params=HIGH)


def _feed(ev: Evaluator, run: str, steps: range, value: float, now: float) -> list[Fired]:
    records = [
        StoredRecord(run, "p", {}, "trainer", "t0", s, now, None, None, {"k3_kl": value})
        for s in steps
    ]
    return ev.feed(ev.plan(records), now)


def _kinds(fired: list[Fired]) -> list[tuple[str, str, int]]:
    return [(f.subject.run_id, f.transition.kind, f.transition.step) for f in fired]


def test_a_silent_series_ends_as_no_data_and_a_nan_series_keeps_firing() -> None:
    ev = Evaluator([HIGH_RULE])
    assert _kinds(_feed(ev, "quiet", range(3), 0.5, now=0.0)) == [("quiet", "firing", 0)]
    assert _kinds(_feed(ev, "nan", range(3), 0.5, now=0.0)) == [("nan", "firing", 0)]
    for t in (30.0, 59.0, 90.0):  # "nan" keeps reporting, NaN only
        assert _feed(ev, "nan", range(int(t), int(t) + 5), math.nan, now=t) == []
    assert ev.no_data(now=59.0) == []
    fired = ev.no_data(now=90.0)
    assert _kinds(fired) == [("quiet", "no_data", 2)]  # the last step it reported
    assert fired[0].metric == "k3_kl" and fired[0].subject.source == "trainer"
    assert _kinds(ev.no_data(now=200.0)) == [("nan", "no_data", 94)]  # then it stopped too


def test_a_series_back_after_no_data_fires_a_new_alert_when_it_still_breaches() -> None:
    ev = Evaluator([HIGH_RULE])
    _feed(ev, "run", range(3), 0.5, now=0.0)
    assert _kinds(ev.no_data(now=100.0)) == [("run", "no_data", 2)]
    assert _kinds(_feed(ev, "run", range(10, 12), 0.5, now=101.0)) == [("run", "firing", 10)]


@pytest.mark.slow
def test_a_series_that_stops_reporting_moves_to_no_data(server_factory: Any) -> None:
    receiver = Receiver()
    try:
        server = server_factory(args=LOCAL_RECEIVERS)
        for run in ("stops", "nans"):
            body = {"run": run_upsert(run, project="p"), "records": [record(run, 0, {"x": 1.0})]}
            assert server.post("/api/v1/ingest", body).status_code == 200
        rule = {"project": "p", "name": "k3 high", "kind": "threshold", "metric": "k3_kl"}
        # Too short for the default pack's vllm-kl high (5 steps above 0.02): only this rule
        # fires on these runs.
        params = {**HIGH, "threshold": 0.01, "no_data_s": 3}
        made = server.post("/api/v1/rules", {**rule, "params": params})
        assert made.status_code == 201, made.text
        made = server.post("/api/v1/receivers", {"project": "p", "url": receiver.url})
        assert made.status_code == 201, made.text
        for run in ("stops", "nans"):
            batch = {"records": [record(run, s, {"k3_kl": 0.04}) for s in range(1, 4)]}
            assert server.post("/api/v1/ingest", batch).status_code == 200

        def states() -> dict[str, str]:
            found = server.query("/api/v1/alerts?project=p")["data"]
            return {a["run_id"]: a["state"] for a in found if a["rule_name"] == "k3 high"}

        assert states() == {"stops": "firing", "nans": "firing"}
        steps = itertools.count(4)

        def stops_goes_quiet() -> bool:
            nan = {"records": [record("nans", next(steps), {"k3_kl": math.nan})]}
            assert server.post("/api/v1/ingest", nan).status_code == 200
            return states().get("stops") == "no_data"

        # "nans" keeps reporting (a NaN each half second) while "stops" has been quiet for the
        # rule's 3 s: the server's own clock decides, so this waits on real time.
        wait_for(stops_goes_quiet, 60, interval=0.5, message="the quiet run never became no_data")
        assert states() == {"stops": "no_data", "nans": "firing"}
        (ended,) = [
            a
            for a in server.query("/api/v1/alerts?run=stops")["data"]
            if a["rule_name"] == "k3 high"
        ]
        assert ended["resolved_step"] == 3 and ended["resolved_at"] is not None
        assert server.query("/api/v1/alerts?state=no_data")["count"] == 1
        assert wait_for(
            lambda: any(
                p["type"] == "alert.no_data" and p["run"] == "stops"
                for _, p in receiver.delivered()
            )
        )
        assert not any(
            p["run"] == "nans" and p["state"] != "firing" for _, p in receiver.delivered()
        )
    finally:
        receiver.close()


def test_no_data_is_found_by_any_replica(migrated_db: Any) -> None:
    first = AlarmService(AlarmStore(migrated_db), base_url="http://monitor")
    first.store.save_rule(HIGH_RULE)
    first.reload()
    # On PostgreSQL a second replica sees only the database; on DuckDB it is the same process.
    other = (
        AlarmService(AlarmStore(migrated_db), base_url="http://monitor")
        if first.turns.shared
        else first
    )
    now = time.time()
    stored = [
        StoredRecord("r1", "p", {}, "trainer", "t0", s, now, None, None, {"k3_kl": 0.5})
        for s in range(3)
    ]
    first.on_ingested(WriteResult(stored=stored))
    first.flush_states()
    other.check_no_data(now=now + 30)
    assert [a.state for a in first.store.alerts(run_id="r1")] == ["firing"]
    other.check_no_data(now=now + 120)
    (alert,) = first.store.alerts(run_id="r1")
    assert (alert.state, alert.resolved_step) == ("no_data", 2)
