"""Incidents: which alerts group, and what their receivers hear — the pure rules on hand-made
alerts, then a collapse cascade through a real server to real receivers: one message with the
first cause and its follow-ups, one escalation, one resolution."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from server.alarms.recording.incidents import assign, notices
from server.alarms.service import AlarmService
from server.alarms.store import AlarmStore
from server.domain import alarms as domain
from server.domain.alarms import Alert, Rule
from server.domain.records import StoredRecord, WriteResult
from server.storage.db import Database
from server.storage.schema import migrate
from server.storage.schema.alarm_tables import outbox
from tests.alarms.test_webhooks import (
    LOCAL_RECEIVERS,
    Receiver,
    assert_each_message_delivered_once,
    outbox_after_stop,
)
from tests.factories import record, run_upsert
from tests.waiting import wait_for


def _alert(aid: str, step: int, *, run: str = "r", severity: str = "warning", **kw: Any) -> Alert:
    values: dict[str, Any] = {
        "id": aid, "rule_id": f"rule-{aid}", "rule_name": f"rule {aid}", "project": "p",
        "run_id": run, "metric": "k3_kl", "source": "trainer", "actor": "t0",
        "severity": severity, "state": "firing", "step": step, "value": 1.0,
        "threshold": 0.5, "started_at": float(step), **kw,
    }  # fmt: skip
    return Alert(**values)


def test_alerts_of_a_run_within_the_window_share_the_first_ones_incident() -> None:
    fired = [_alert("b", 12), _alert("a", 10), _alert("c", 300), _alert("x", 11, run="other")]
    got = {a.id: a.incident_id for a in assign(fired, {}, window_steps=100)}
    assert got == {"a": "a", "b": "a", "c": "c", "x": "x"}


def test_an_alert_joins_the_open_incident_stored_before() -> None:
    stored = {("p", "r"): [_alert("a", 10, incident_id="a")]}
    (joined,) = assign([_alert("b", 90)], stored, window_steps=100)
    (fresh,) = assign([_alert("c", 111)], stored, window_steps=100)
    (muted,) = assign([_alert("d", 20, silenced=True)], stored, window_steps=100)
    assert (joined.incident_id, fresh.incident_id, muted.incident_id) == ("a", "c", None)


def test_one_notice_opens_an_incident_with_its_first_cause_first() -> None:
    opened = assign([_alert("b", 12), _alert("a", 10)], {}, window_steps=100)
    (notice,) = notices(opened, [], [], {})
    assert notice.kind == "firing" and notice.incident_id == "a"
    assert [a.id for a in notice.alerts] == ["a", "b"] and notice.headline.id == "a"


def test_a_follow_up_escalates_only_above_the_incidents_severity() -> None:
    first = _alert("a", 10, incident_id="a")
    stored = {"a": [first]}
    (same,) = notices([_alert("b", 20, incident_id="a")], [], [], stored)
    (higher,) = notices([_alert("c", 30, incident_id="a", severity="critical")], [], [], stored)
    assert (same.kind, same.escalates) == ("followup", False)
    assert (higher.kind, higher.escalates, higher.subject.id) == ("followup", True, "c")
    assert [a.id for a in higher.alerts] == ["a", "c"]


def test_the_incident_ends_when_its_last_alert_ends() -> None:
    a = _alert("a", 10, incident_id="a")
    b = _alert("b", 20, incident_id="a")
    stored = {"a": [a, b]}
    assert notices([], [a.resolved(step=15, at=1.0)], [], stored) == []  # b still fires
    done = {"a": [a.resolved(step=15, at=1.0), b]}
    (end,) = notices([], [b.resolved(step=25, at=2.0)], [], done)
    assert end.kind == "resolved" and {x.state for x in end.alerts} == {"resolved"}
    (quiet,) = notices([], [b.without_data(step=21, at=2.0)], [], done)
    assert quiet.kind == "no_data"


def test_an_alert_from_before_incidents_is_an_incident_of_its_own() -> None:
    old = _alert("old", 5)
    (end,) = notices([], [old.resolved(step=8, at=1.0)], [], {"old": [old]})
    assert (end.kind, end.incident_id, [a.id for a in end.alerts]) == ("resolved", "old", ["old"])
    assert notices([], [replace(old, silenced=True)], [], {}) == []


def test_a_follow_up_that_fires_and_ends_in_one_batch_stays_in_its_incident(
    tmp_path: Path,
) -> None:
    db = Database(str(tmp_path / "one.duckdb"))
    migrate.upgrade(db)
    service = AlarmService(AlarmStore(db), base_url="http://monitor")
    params = {"threshold": 1.0, "for_steps": 1, "resolve_steps": 1}
    for name in ("x", "y"):
        rule = Rule(id=name, project="p", name=f"{name} high", kind="threshold", metric=name)
        service.store.save_rule(rule.with_changes(params=params))
    service.store.add_receiver(
        domain.Receiver("rcv", "p", "http://hook.example/x", "standard", None, 0)
    )
    service.reload()
    stored = [
        StoredRecord("run", "p", {}, "trainer", "t0", s, 0.0, None, None, {"x": 5.0, "y": y})
        for s, y in enumerate([0.0, 5.0, 0.0])  # x fires at 0; y fires at 1 and ends at 2
    ]
    service.on_ingested(WriteResult(stored=stored))
    with db.read() as conn:
        bodies = [json.loads(r.body) for r in conn.execute(sa.select(outbox.c.body)).all()]
    db.dispose()
    (opening,) = bodies  # x still fires: the incident has not ended
    assert opening["type"] == "alert.firing" and opening["rule"] == "x high"
    assert [(f["rule"], f["state"]) for f in opening["follow_ups"]] == [("y high", "resolved")]


# -- through a real server --------------------------------------------------------------------
def _steps(steps: range, **values: float) -> list[dict[str, Any]]:
    base = {"k3_kl": 1e-3, "grad_norm": 1.0, "ratio_dev_1e4": 2.0, "entropy": 0.8}
    out = []
    for s in steps:
        metrics = {**base, **values}
        if "k3_kl" not in values:
            metrics["k3_kl"] = 1e-3 * (1 + 0.1 * (s % 4))
        out.append(record("inc", s, metrics))
    return out


@pytest.mark.slow
def test_a_collapse_is_one_incident_opened_escalated_and_resolved(server_factory: Any) -> None:
    receiver = Receiver()
    try:
        args = [*LOCAL_RECEIVERS, "--alert-group-wait-s", "5", "--incident-window-steps", "100"]
        server = server_factory(args=args)

        def send(records: list[dict[str, Any]], **extra: Any) -> None:
            response = server.post("/api/v1/ingest", {"records": records, **extra})
            assert response.status_code == 200, response.text

        send(_steps(range(40)), run=run_upsert("inc", project="p"))
        assert (
            server.post("/api/v1/receivers", {"project": "p", "url": receiver.url}).status_code
            == 201
        )
        send(_steps(range(40, 44), k3_kl=0.2))  # spike (41) and rise (43): the first message
        send(_steps(range(44, 46), k3_kl=0.2))  # vllm-kl high (44) joins it while it waits
        assert wait_for(lambda: len(receiver.delivered()) == 1)
        send(_steps(range(46, 48), k3_kl=0.2, grad_norm=100.0))  # the precursor: critical
        assert wait_for(lambda: len(receiver.delivered()) == 2)
        send(_steps(range(48, 52), k3_kl=0.2, grad_norm=100.0, ratio_dev_1e4=80.0))  # warning
        send(_steps(range(52, 70)))  # everything recovers
        assert wait_for(lambda: len(receiver.delivered()) == 3)
        bodies = [body for _, body in receiver.delivered()]
        assert [b["type"] for b in bodies] == ["alert.firing", "alert.escalated", "alert.resolved"]

        opening, escalation, end = bodies
        assert (opening["rule"], opening["step"]) == ("vllm-kl spike", 41)
        assert [(f["rule"], f["step"]) for f in opening["follow_ups"]] == [
            ("vllm-kl rise", 43),
            ("vllm-kl high", 44),  # 0.2 > 0.02 for its fifth step
        ]
        assert opening["incident"]["severity"] == "warning"
        assert escalation["escalated_by"]["rule"] == "collapse precursor"
        assert escalation["incident"]["severity"] == "critical"
        assert escalation["rule"] == "vllm-kl spike"  # still headed by the first cause
        incident = opening["incident"]["id"]
        assert (
            incident == opening["alert_id"] == escalation["incident"]["id"] == end["incident"]["id"]
        )
        rules = {f["rule"] for f in end["follow_ups"]}
        assert rules == {"vllm-kl rise", "vllm-kl high", "collapse precursor", "ratio drift"}
        assert end["incident"]["state"] == "resolved" and end["state"] == "resolved"
        assert {f["state"] for f in end["follow_ups"]} == {"resolved"}

        alerts = server.query("/api/v1/alerts?run=inc")["data"]
        assert {a["incident_id"] for a in alerts} == {incident} and len(alerts) == 5

        # After the end, a new spike is a new incident.
        send(_steps(range(70, 100)))
        send(_steps(range(100, 103), k3_kl=0.2))
        assert wait_for(lambda: len(receiver.delivered()) == 4)
        again = receiver.delivered()[3][1]
        assert again["type"] == "alert.firing" and again["incident"]["id"] != incident
        # Nothing else was sent, nor waits to be: four messages for the two incidents.
        assert_each_message_delivered_once(receiver, outbox_after_stop(server))
        assert len(receiver.delivered()) == 4
    finally:
        receiver.close()
