"""Incidents as the API and the dashboard read them: the list (what fires now, what ended
lately), one incident's timeline, and acknowledging one.

An acknowledgement is a change in the record of changes (`server.domain.incidents.ACK_KIND`):
recording reads it to stop the incident's escalations and repeats (its people know), while the
message that it ended still goes out.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from sqlalchemy.engine import Connection

from server.alarms.delivering.payloads import diagnosis_lines
from server.domain.alarms import SEVERITIES, Alert, Silence
from server.domain.identity import Change
from server.domain.incidents import (
    ACK_ACTION,
    ACK_KIND,
    Acknowledgement,
    DeliveryOutcome,
    EventKind,
    Incident,
    IncidentState,
    Notification,
    Timeline,
    TimelineEvent,
)
from server.domain.labels import InvalidLabelFilter, parse_optional
from server.errors import Conflict, NotFound, Rejected
from server.storage.alarms import alerts as alarm_alerts
from server.storage.alarms import changes
from server.storage.alarms import config as alarm_config
from server.storage.alarms import incidents as alarm_incidents
from server.storage.alarms.incidents import IncidentRow, MessageRow
from server.storage.db import Database
from server.storage.reading import runs

_CAUSE = re.compile(r'Likely cause: (?:[^"\\]|\\.)*')
"""A likely cause as a body carries it, in any format (`cause_line`'s words, JSON-escaped)."""

RECENT_S = 24 * 3600.0
"""How long an ended incident stays in the list unless a reader asks for longer."""


def missing_incident() -> NotFound:
    return NotFound(
        "no incident with this id in the projects you can read; list them with "
        "GET /api/v1/incidents or on the alerts page"
    )


class IncidentReads:
    def __init__(self, db: Database) -> None:
        self._db = db

    def listed(
        self,
        *,
        projects: Sequence[str] | None,
        project: str | None = None,
        run_id: str | None = None,
        state: IncidentState | None = None,
        severity: str | None = None,
        label: str | None = None,
        ended_within_s: float = RECENT_S,
        limit: int = 200,
        now: float | None = None,
    ) -> list[Incident]:
        """Firing incidents and those that ended within `ended_within_s`, firing first, then
        the most severe, then the newest; narrowed by state, severity (the incident's worst)
        and a label filter on its run (`key=value`, `key!=value`, `key`)."""
        now = time.time() if now is None else now
        try:
            wanted = parse_optional(label)
        except InvalidLabelFilter as exc:
            raise Rejected(f"label: {exc}") from exc
        with self._db.read() as conn:
            rows = alarm_incidents.incident_rows(
                conn,
                projects=projects,
                project=project,
                run_id=run_id,
                ended_since=now - ended_within_s,
                limit=limit if state is None and severity is None and wanted is None else 10_000,
            )
            rows = [r for r in rows if _kept(r, state, severity)]
            if wanted is not None:
                labels = _labels(conn, {(r.project, r.run_id) for r in rows})
                rows = [r for r in rows if wanted.matches(labels.get((r.project, r.run_id), {}))]
            rows = rows[:limit]
            heads = alarm_incidents.headlines(conn, [r.id for r in rows])
            acks = alarm_incidents.acknowledgements(conn, [r.id for r in rows])
        return [_incident(r, heads[r.id], acks.get(r.id)) for r in rows if r.id in heads]

    def alerts(
        self, incident_ids: Sequence[str], *, projects: Sequence[str] | None
    ) -> dict[str, list[Alert]]:
        """The alerts of these incidents, the first cause first, among `projects`."""
        with self._db.read() as conn:
            found = alarm_alerts.of_incidents(conn, incident_ids)
        return {
            incident: sorted(
                (a for a in alerts if projects is None or a.project in projects),
                key=lambda a: (a.step, a.started_at),
            )
            for incident, alerts in found.items()
        }

    def of_run(
        self, run_id: str, *, projects: Sequence[str] | None, limit: int = 200
    ) -> list[Alert]:
        """A run's alerts, the newest first (silenced ones too: they are shown, flagged)."""
        with self._db.read() as conn:
            return alarm_alerts.alerts(conn, run_id=run_id, projects=projects, limit=limit)

    def causes_of(self, alerts: Sequence[Alert]) -> dict[str, str]:
        """The likely cause of each incident these alerts belong to, by incident id."""
        heads = {(a.incident_id or a.id, a.project) for a in alerts if not a.silenced}
        with self._db.read() as conn:
            bodies = alarm_incidents.opening_bodies(conn, sorted(heads))
        return _causes(bodies)

    def causes(self, incidents: Sequence[Incident]) -> dict[str, str]:
        """The likely cause each incident's first message carried ("Likely cause: … (score
        0.82) …"); an incident whose message carried none (no receiver, a rule whose alerts
        are not diagnosed, a cause that could not be read) has no entry."""
        with self._db.read() as conn:
            bodies = alarm_incidents.opening_bodies(conn, [(i.id, i.project) for i in incidents])
        return _causes(bodies)

    def get(self, incident_id: str, *, projects: Sequence[str] | None) -> Timeline:
        """The incident with its alerts and everything that happened to it, oldest first."""
        with self._db.read() as conn:
            alerts = alarm_alerts.of_incidents(conn, [incident_id]).get(incident_id, [])
            alerts = [a for a in alerts if projects is None or a.project in projects]
            head = next((a for a in alerts if a.id == incident_id), None)
            if head is None:
                raise missing_incident()
            acks = changes.listed(
                conn, projects=[head.project], kind=ACK_KIND, object_ids=[incident_id]
            )
            notes = alarm_incidents.messages(conn, incident_id)
            labels = _labels(conn, {(head.project, head.run_id)}).get(
                (head.project, head.run_id), {}
            )
            silences = [
                s for s in alarm_config.silences(conn, head.project) if _covers(s, alerts, labels)
            ]
            made = changes.listed(
                conn,
                projects=[head.project],
                kind="silence",
                object_ids=[s.id for s in silences] or ["-"],
            )
        row = _row_of(alerts)
        ack = min(
            (alarm_incidents.ack_of(c) for c in acks if c.action == ACK_ACTION),
            key=lambda a: a.at,
            default=None,
        )
        incident = _incident(row, head, ack)
        events = _alert_events(alerts) + [_notification_event(m) for m in notes]
        events += [_ack_event(c) for c in acks]
        events += _silence_events(silences, made)
        ordered = sorted(events, key=lambda e: (e.at, e.kind))
        first = tuple(sorted(alerts, key=lambda a: (a.step, a.started_at)))
        return Timeline(incident, first, tuple(ordered), tuple(silences))

    def acknowledge(self, incident_id: str, *, projects: Sequence[str] | None) -> Incident:
        """The incident about to be acknowledged (its project names who may): refused when it
        has nothing firing or is acknowledged already."""
        timeline = self.get(incident_id, projects=projects)
        incident = timeline.incident
        if incident.acknowledged is not None:
            ack = incident.acknowledged
            raise Conflict(
                f"this incident was acknowledged already, by {ack.by} at "
                f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(ack.at))}"
            )
        if incident.state != "firing":
            raise Conflict(
                "this incident has ended: nothing is left to acknowledge (its alerts are "
                f"{incident.state.replace('_', ' ')})"
            )
        return incident


def _causes(bodies: Mapping[str, Sequence[str]]) -> dict[str, str]:
    out = {}
    for incident, texts in bodies.items():
        for text in texts:
            found = _CAUSE.search(text)
            if found:
                out[incident] = json.loads(f'"{found.group(0)}"').splitlines()[0]
                break
    return out


def _kept(row: IncidentRow, state: IncidentState | None, severity: str | None) -> bool:
    if severity is not None and SEVERITIES[row.rank] != severity:
        return False
    return state is None or _state(row) == state


def _state(row: IncidentRow) -> IncidentState:
    if row.firing:
        return "firing"
    return "no_data" if row.no_data else "resolved"


def _incident(row: IncidentRow, head: Alert, ack: Acknowledgement | None) -> Incident:
    return Incident(
        id=row.id,
        project=row.project,
        run_id=row.run_id,
        headline=head,
        severity=SEVERITIES[row.rank],
        state=_state(row),
        alerts=row.alerts,
        firing=row.firing,
        opened_at=row.opened_at,
        ended_at=row.ended_at,
        acknowledged=ack,
    )


def _row_of(alerts: Sequence[Alert]) -> IncidentRow:
    """An incident's figures, summed up from its alerts as the list's query sums them."""
    head = min(alerts, key=lambda a: (a.step, a.started_at))
    firing = sum(1 for a in alerts if a.open)
    ended = [a.resolved_at for a in alerts if a.resolved_at is not None]
    return IncidentRow(
        id=head.incident_id or head.id,
        project=head.project,
        run_id=head.run_id,
        alerts=len(alerts),
        firing=firing,
        no_data=sum(1 for a in alerts if a.state == "no_data"),
        rank=max(SEVERITIES.index(a.severity) for a in alerts),
        opened_at=min(a.started_at for a in alerts),
        ended_at=None if firing or not ended else max(ended),
    )


def _labels(conn: Connection, keys: set[tuple[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    out: dict[tuple[str, str], dict[str, str]] = {}
    for project, run_id in keys:
        for row in runs.row(conn, run_id, [project]):
            out[(project, run_id)] = runs.loads(row.labels, {})
    return out


def _covers(silence: Silence, alerts: Sequence[Alert], labels: Mapping[str, str]) -> bool:
    """Whether the silence would mute any of the incident's alerts (whenever it was active)."""
    rules = {a.rule_id for a in alerts}
    if silence.rule_id and silence.rule_id not in rules:
        return False
    if silence.run_id and silence.run_id not in {a.run_id for a in alerts}:
        return False
    wanted = parse_optional(silence.label)
    return wanted is None or wanted.matches(labels)


def _alert_events(alerts: Sequence[Alert]) -> list[TimelineEvent]:
    out = []
    for a in alerts:
        fired = f"{a.severity} {a.rule_name!r} fired on {a.metric} at step {a.step}"
        out.append(TimelineEvent(at=a.started_at, kind="alert_fired", text=fired, alert_id=a.id))
        if a.resolved_at is not None:
            if a.state == "no_data":
                text = f"{a.rule_name!r} ended: no data after step {a.resolved_step}"
                kind: EventKind = "alert_no_data"
            else:
                text = f"{a.rule_name!r} resolved at step {a.resolved_step}"
                kind = "alert_resolved"
            out.append(TimelineEvent(at=a.resolved_at, kind=kind, text=text, alert_id=a.id))
    return out


def _notification_event(m: MessageRow) -> TimelineEvent:
    note = notification(m)
    text = f"{note.kind} message to {note.receiver}: {note.outcome.replace('_', ' ')}"
    if note.attempts:
        text += f" ({note.attempts} attempt{'s' if note.attempts != 1 else ''})"
    return TimelineEvent(at=m.created_at, kind="notification", text=text, notification=note)


def notification(m: MessageRow) -> Notification:
    """One outbox row as a person reads it: to whom, what, and how its delivery went."""
    kind = _kind_of(m.id)
    d = m.delivery or {}
    outcome: DeliveryOutcome
    if d.get("delivered_at") is not None:
        outcome = "delivered"
    elif d.get("gave_up_at") is not None:
        outcome = "gave_up"
    elif d.get("folded_into") is not None:
        outcome = "folded"
    elif d.get("attempts"):
        outcome = "retrying"
    else:
        outcome = "pending"
    host = urlsplit(m.receiver_url).hostname if m.receiver_url else None
    receiver = f"{m.receiver_format} to {host}" if host else f"{m.receiver_id} (deleted)"
    return Notification(
        id=m.id,
        receiver_id=m.receiver_id,
        receiver=receiver,
        kind=kind,
        created_at=m.created_at,
        attempts=int(d.get("attempts") or 0),
        outcome=outcome,
        delivered_at=d.get("delivered_at"),
        last_status=d.get("last_status"),
        last_error=d.get("last_error"),
        diagnosis=_diagnosis(d.get("body") or m.outbox_body),
    )


def _kind_of(message_id: str) -> str:
    """opened, escalated, followup, repeat or ended, from the message id recording gave it
    (`msg_<incident>_<kind>_…`; the incident id holds one underscore, after its `al` prefix)."""
    parts = message_id.split("_")
    return parts[3] if len(parts) > 3 else "message"


def _diagnosis(body: str) -> tuple[str, ...]:
    """The diagnosis a body carries, in lines: the standard body's object, or Slack's and
    Alertmanager's text lines that follow it; none for a draft not made yet."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ()
    if isinstance(parsed, dict) and "draft" in parsed:
        return ()
    if isinstance(parsed, dict) and isinstance(parsed.get("diagnosis"), dict):
        return tuple(diagnosis_lines(parsed["diagnosis"]))
    if isinstance(parsed, list) and parsed and isinstance(parsed[0], dict):
        notes = parsed[0].get("annotations", {})
        text = notes.get("diagnosis") or notes.get("likely_cause")
        return (str(text),) if text else ()
    return ()


def _ack_event(change: Change) -> TimelineEvent:
    text = "acknowledged" + (f": {change.summary}" if change.summary else "")
    return TimelineEvent(at=change.changed_at, kind="ack", text=text, by=change.actor)


def _silence_events(silences: Sequence[Silence], made: Sequence[Change]) -> list[TimelineEvent]:
    by = {(c.object_id, c.action): c.actor for c in made}
    out = []
    for s in silences:
        what = ", ".join(
            f"{k} {v}" for k, v in (("rule", s.rule_id), ("run", s.run_id), ("label", s.label)) if v
        )
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(s.until))
        text = f"silence of {what or 'the project'} until {until}" + (
            f": {s.comment}" if s.comment else ""
        )
        out.append(
            TimelineEvent(at=s.created_at, kind="silence", text=text, by=by.get((s.id, "create")))
        )
    return out
