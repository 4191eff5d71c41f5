"""Incidents read from stored alerts, on DuckDB and PostgreSQL: firing first, then the most
severe, then the newest; recently ended ones only; silenced alerts in none; the first cause
heads each; an acknowledgement in the record of changes is the incident's."""

from __future__ import annotations

from typing import Any

from server import auth
from server.domain.alarms import Alert
from server.domain.incidents import ACK_ACTION, ACK_KIND
from server.identity.changes import Changes
from server.services.reads.incidents import IncidentReads
from server.storage.alarms import alerts as alarm_alerts

NOW = 1_800_000_000.0


def _alert(aid: str, incident: str, run: str, **kw: Any) -> Alert:
    values: dict[str, Any] = {
        "id": aid, "rule_id": "r", "rule_name": f"rule {aid}", "project": "p", "run_id": run,
        "metric": "k3_kl", "source": "trainer", "actor": "t0", "severity": "warning",
        "state": "firing", "step": 10, "value": 1.0, "threshold": 0.5,
        "started_at": NOW - 100, "incident_id": incident, **kw,
    }  # fmt: skip
    return Alert(**values)


def test_incidents_are_listed_firing_first_then_worst_then_newest(migrated_db: Any) -> None:
    ended = {"state": "resolved", "resolved_at": NOW - 10, "resolved_step": 20}
    alerts = [
        _alert("a1", "a1", "old", started_at=NOW - 500),
        _alert("b1", "b1", "new", started_at=NOW - 50),
        _alert("c1", "c1", "crit", started_at=NOW - 900),
        _alert("c2", "c1", "crit", severity="critical", step=12, started_at=NOW - 800),
        _alert("d1", "d1", "done", **ended),
        _alert("e1", "e1", "long-ago", **{**ended, "resolved_at": NOW - 3 * 86400}),
        _alert("s1", None, "muted", silenced=True),  # type: ignore[arg-type]
        _alert("q1", "q1", "other", project="q"),
    ]
    with migrated_db.write() as conn:
        alarm_alerts.insert(conn, alerts)
    views = IncidentReads(migrated_db)
    found = views.listed(projects=["p"], now=NOW)
    assert [i.id for i in found] == ["c1", "b1", "a1", "d1"]
    crit = found[0]
    assert (crit.severity, crit.alerts, crit.firing, crit.headline.id) == ("critical", 2, 2, "c1")
    assert found[-1].state == "resolved" and found[-1].ended_at == NOW - 10
    assert [i.id for i in views.listed(projects=["p"], severity="critical", now=NOW)] == ["c1"]
    assert [i.id for i in views.listed(projects=["p"], state="resolved", now=NOW)] == ["d1"]
    assert views.listed(projects=None, project="q", now=NOW)[0].id == "q1"

    Changes(migrated_db).record(
        auth.OPEN, project="p", kind=ACK_KIND, object_id="b1", action=ACK_ACTION, summary="mine"
    )
    (acked,) = [i for i in views.listed(projects=["p"], now=NOW) if i.id == "b1"]
    assert acked.acknowledged is not None and acked.acknowledged.by == "open"
    timeline = views.get("c1", projects=["p"])
    assert [e.kind for e in timeline.events] == ["alert_fired", "alert_fired"]
