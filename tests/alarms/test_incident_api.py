"""Incidents through a real server and a real webhook receiver: the list, one incident's
timeline, acknowledging one (its escalation never reaches the receiver, its end does), who may
act, and imports of past steps that record their alerts without paging anyone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.schema import migrate
from tests.alarms.test_incidents import _steps
from tests.alarms.test_webhooks import LOCAL_RECEIVERS, Receiver
from tests.factories import run_upsert
from tests.signal_runs import body
from tests.waiting import wait_for


def _send(server: Any, records: list[dict[str, Any]], query: str = "", **extra: Any) -> Any:
    response = server.post(f"/api/v1/ingest{query}", {"records": records, **extra})
    assert response.status_code == 200, response.text
    return response.json()


def _of(run: str, steps: range, **values: float) -> list[dict[str, Any]]:
    return [{**r, "run_id": run} for r in _steps(steps, **values)]


def _tokens(path: Path) -> dict[str, str]:
    db = Database(str(path))
    migrate.upgrade(db)
    tokens = TokenService(db)
    made = {
        "server": tokens.create(project=None, scope="server-admin")[1],
        "admin": tokens.create(project="p", scope="admin")[1],
        "read": tokens.create(project="p", scope="read")[1],
        "other": tokens.create(project="q", scope="read")[1],
    }
    db.dispose()
    return made


@pytest.mark.slow
def test_acknowledging_stops_the_escalation_but_not_the_end(
    server_factory: Any, tmp_path: Path
) -> None:
    receiver = Receiver()
    try:
        tokens = _tokens(tmp_path / "ack.duckdb")
        args = [*LOCAL_RECEIVERS, "--incident-window-steps", "100"]
        server = server_factory(tmp_path / "ack.duckdb", args=args)
        server.token = tokens["server"]
        _send(server, _steps(range(40)), run=run_upsert("inc", project="p"))
        created = server.post("/api/v1/receivers", {"project": "p", "url": receiver.url})
        assert created.status_code == 201
        _send(server, _steps(range(40, 44), k3_kl=0.2))  # the spike opens an incident
        assert wait_for(lambda: len(receiver.delivered()) == 1)

        (incident,) = server.query("/api/v1/incidents?state=firing")["data"]
        assert incident["headline"]["rule_name"] == "vllm-kl spike"
        assert incident["severity"] == "warning" and incident["acknowledged"] is None
        refused = server.post(f"/api/v1/incidents/{incident['id']}/ack", {}, token=tokens["read"])
        assert refused.status_code == 403 and "admin role" in refused.json()["detail"]
        hidden = server.post(f"/api/v1/incidents/{incident['id']}/ack", {}, token=tokens["other"])
        assert hidden.status_code == 404
        acked = server.post(
            f"/api/v1/incidents/{incident['id']}/ack", {"comment": "on it"}, token=tokens["admin"]
        )
        assert acked.status_code == 200, acked.text
        assert acked.json()["incident"]["acknowledged"]["comment"] == "on it"
        again = server.post(f"/api/v1/incidents/{incident['id']}/ack", {}, token=tokens["admin"])
        assert again.status_code == 409 and "already" in again.json()["detail"]

        _send(server, _steps(range(44, 48), k3_kl=0.2, grad_norm=100.0))  # precursor: critical
        _send(server, _steps(range(48, 70)))  # everything recovers
        assert wait_for(lambda: len(receiver.delivered()) == 2)
        kinds = [b["type"] for _, b in receiver.delivered()]
        assert kinds == ["alert.firing", "alert.resolved"]  # no alert.escalated

        def recorded() -> dict[str, Any] | None:
            """The timeline once the worker has recorded the end message's delivery (the
            receiver hears it a moment before the outcome is written)."""
            found = server.query(f"/api/v1/incidents/{incident['id']}", token=tokens["read"])
            notes = [e["notification"] for e in found["events"] if e["kind"] == "notification"]
            moving = ("pending", "retrying")
            done = len(notes) == 2 and all(n["outcome"] not in moving for n in notes)
            return found if done else None

        timeline = wait_for(recorded)
        assert timeline["incident"]["severity"] == "critical"
        assert timeline["incident"]["state"] == "resolved"
        events = timeline["events"]
        (ack,) = [e for e in events if e["kind"] == "ack"]
        assert ack["by"].startswith("token:") and ack["text"] == "acknowledged: on it"
        sent = [e["notification"] for e in events if e["kind"] == "notification"]
        assert {n["kind"] for n in sent} == {"opened", "ended"}
        assert all(n["outcome"] == "delivered" and n["attempts"] == 1 for n in sent)
        assert all(n["receiver"] == "standard to 127.0.0.1" for n in sent)
        fired = {e["alert_id"] for e in events if e["kind"] == "alert_fired"}
        assert fired == {a["id"] for a in timeline["alerts"]} and len(fired) >= 3
        assert any(e["kind"] == "alert_resolved" for e in events)
        changes = server.query("/api/v1/changes?kind=incident", token=tokens["read"])["data"]
        assert [(c["action"], c["object_id"]) for c in changes] == [("acknowledge", incident["id"])]
    finally:
        receiver.close()


def test_incidents_list_filters_and_refuses_bad_input(server_factory: Any) -> None:
    server = server_factory()
    _send(server, _of("a", range(40)), run=run_upsert("a", project="p", labels={"team": "x"}))
    _send(server, _of("a", range(40, 48), k3_kl=0.5))
    found = server.query("/api/v1/incidents")["data"]
    assert [i["run_id"] for i in found] == ["a"]
    assert server.query("/api/v1/incidents?label=team=x")["count"] == 1
    assert server.query("/api/v1/incidents?label=team=y")["count"] == 0
    assert server.query("/api/v1/incidents?severity=info")["count"] == 0
    assert server.query("/api/v1/incidents?state=resolved")["count"] == 0
    bad = server.get("/api/v1/incidents?severity=loud")
    assert bad.status_code == 422 and "severity" in bad.text
    assert server.get("/api/v1/incidents/al_nope").status_code == 404
    assert "/api/v1/incidents/{incident_id}/ack" in server.query("/openapi.json")["paths"]


def test_a_trl_run_far_beyond_from_its_first_step_is_critical_by_its_tenth(
    server_factory: Any,
) -> None:
    server = server_factory()
    trl = {"abs_logp_diff_mean": 0.26, "ratio_mean@trl": 0.03, "entropy": 1.1}
    _send(
        server,
        body("trl", trl, steps=10, project="p")["records"],
        run=run_upsert("trl", project="p"),
    )
    (incident,) = server.query("/api/v1/incidents?run=trl")["data"]
    assert incident["severity"] == "critical"
    alerts = server.query("/api/v1/alerts?run=trl")["data"]
    critical = [a for a in alerts if a["severity"] == "critical"]
    assert [a["rule_name"] for a in critical] == ["vllm-kl far beyond"]
    assert critical[0]["step"] <= 9 and critical[0]["metric"] == "abs_logp_diff_mean"


def test_an_import_records_alerts_and_pages_only_when_asked(server_factory: Any) -> None:
    receiver = Receiver()
    try:
        server = server_factory(args=LOCAL_RECEIVERS)
        _send(server, _of("past", range(3)), run=run_upsert("past", project="p"))
        assert (
            server.post("/api/v1/receivers", {"project": "p", "url": receiver.url}).status_code
            == 201
        )
        quiet = _send(
            server,
            _of("past", range(3, 12), k3_kl=0.5),
            "?notify=false",
        )
        assert quiet["alerts"] >= 1
        assert server.query("/api/v1/incidents?run=past")["count"] == 1
        _send(server, _of("loud", range(3)), run=run_upsert("loud", project="p"))
        loud = _send(
            server,
            _of("loud", range(3, 12), k3_kl=0.5),
            "?notify=true",
        )
        assert loud["alerts"] >= 1
        assert wait_for(lambda: len(receiver.delivered()) >= 1)
        runs = {b["run"] for _, b in receiver.delivered()}
        assert runs == {"loud"}
    finally:
        receiver.close()
