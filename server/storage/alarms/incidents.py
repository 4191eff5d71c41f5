"""Incident reads: incidents summed up from their alerts in the database, and the messages
recording wrote about one incident with what delivery made of them.

An incident is the alerts that share an `incident_id` (an alert recorded before incidents, with
none, is an incident of its own, under its id). A list reads one grouped query over the alerts
of the projects asked for, then the first cause of each incident it returns: what it costs
follows the incidents it shows, never the points behind them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.domain.alarms import SEVERITIES, Alert
from server.domain.identity import Change
from server.domain.incidents import ACK_ACTION, ACK_KIND, Acknowledgement
from server.storage.alarms import changes
from server.storage.schema import alarm_tables as t

_a = t.alerts.c
_o = t.outbox.c
_d = t.deliveries.c
_r = t.receivers.c


@dataclass(frozen=True)
class IncidentRow:
    """An incident's figures as the database sums them up."""

    id: str
    project: str
    run_id: str
    alerts: int
    firing: int
    no_data: int
    rank: int  # the worst severity among its alerts, as an index of SEVERITIES
    opened_at: float
    ended_at: float | None


@dataclass(frozen=True)
class MessageRow:
    """An outbox row about an incident, with its delivery record (None: not taken in yet)."""

    id: str
    receiver_id: str
    receiver_format: str | None
    receiver_url: str | None
    created_at: float
    outbox_body: str
    delivery: dict[str, Any] | None


def _incident() -> sa.ColumnElement[str]:
    return sa.func.coalesce(_a.incident_id, _a.id)


def _rank() -> sa.ColumnElement[int]:
    return sa.case(*((_a.severity == name, i) for i, name in enumerate(SEVERITIES)), else_=0)


def incident_rows(
    conn: Connection,
    *,
    projects: Sequence[str] | None,
    project: str | None = None,
    run_id: str | None = None,
    ended_since: float | None = None,
    limit: int = 200,
) -> list[IncidentRow]:
    """Incidents with an alert firing, and those that ended at or after `ended_since` (all that
    ended when None): firing first, then the most severe, then the newest. Silenced alerts are
    in no incident and are left out."""
    incident = _incident().label("incident")
    firing = sa.func.sum(sa.case((_a.state == "firing", 1), else_=0))
    query = (
        sa.select(
            incident,
            sa.func.min(_a.project).label("project"),
            sa.func.min(_a.run_id).label("run_id"),
            sa.func.count().label("alerts"),
            firing.label("firing"),
            sa.func.sum(sa.case((_a.state == "no_data", 1), else_=0)).label("no_data"),
            sa.func.max(_rank()).label("worst"),
            sa.func.min(_a.started_at).label("opened_at"),
            sa.func.max(_a.resolved_at).label("ended_at"),
        )
        .where(_a.silenced.is_(False))
        .group_by(incident)
    )
    if projects is not None:
        query = query.where(_a.project.in_(list(projects)))
    if project is not None:
        query = query.where(_a.project == project)
    if run_id is not None:
        query = query.where(_a.run_id == run_id)
    if ended_since is not None:
        query = query.having(sa.or_(firing > 0, sa.func.max(_a.resolved_at) >= ended_since))
    query = query.order_by(
        sa.case((firing > 0, 0), else_=1),
        sa.desc("worst"),
        sa.desc("opened_at"),
        incident,
    ).limit(limit)
    return [
        IncidentRow(
            id=row.incident,
            project=row.project,
            run_id=row.run_id,
            alerts=int(row.alerts),
            firing=int(row.firing or 0),
            no_data=int(row.no_data or 0),
            rank=int(row.worst or 0),
            opened_at=float(row.opened_at),
            ended_at=None if row.firing else row.ended_at,
        )
        for row in conn.execute(query)
    ]


def headlines(conn: Connection, incident_ids: Sequence[str]) -> dict[str, Alert]:
    """The first cause of each incident: the alert whose id is the incident's."""
    if not incident_ids:
        return {}
    rows = conn.execute(sa.select(t.alerts).where(_a.id.in_(sorted(set(incident_ids)))))
    return {row.id: Alert(**row._mapping) for row in rows}


def messages(conn: Connection, incident_id: str) -> list[MessageRow]:
    """What recording wrote about the incident for its receivers, oldest first, each with its
    delivery record and receiver (format and URL; None when the receiver is gone)."""
    query = (
        sa.select(
            _o.id,
            _o.receiver_id,
            _r.format,
            _r.url,
            _o.created_at,
            _o.body,
            *[c.label(f"d_{c.name}") for c in t.deliveries.columns],
        )
        .select_from(
            t.outbox.outerjoin(t.deliveries, _d.message_id == _o.id).outerjoin(
                t.receivers, _r.id == _o.receiver_id
            )
        )
        .where(_o.id.startswith(f"msg_{incident_id}_", autoescape=True))
        .order_by(_o.seq)
    )
    out = []
    for row in conn.execute(query):
        m = row._mapping
        delivery = None
        if m["d_message_id"] is not None:
            delivery = {c.name: m[f"d_{c.name}"] for c in t.deliveries.columns}
        out.append(
            MessageRow(
                id=m["id"],
                receiver_id=m["receiver_id"],
                receiver_format=m["format"],
                receiver_url=m["url"],
                created_at=float(m["created_at"]),
                outbox_body=m["body"],
                delivery=delivery,
            )
        )
    return out


def acknowledgements(conn: Connection, incident_ids: Sequence[str]) -> dict[str, Acknowledgement]:
    """The first acknowledgement of each of these incidents that has one (a change of kind
    `ACK_KIND` in the record of changes)."""
    if not incident_ids:
        return {}
    found = changes.listed(
        conn, projects=None, kind=ACK_KIND, object_ids=list(incident_ids), limit=10_000
    )
    out: dict[str, Acknowledgement] = {}
    for change in sorted(found, key=lambda c: c.changed_at):
        if change.action == ACK_ACTION and change.object_id not in out:
            out[change.object_id] = ack_of(change)
    return out


def ack_of(change: Change) -> Acknowledgement:
    return Acknowledgement(
        incident_id=change.object_id,
        project=change.project,
        by=change.actor,
        at=change.changed_at,
        comment=change.summary,
    )


def opening_bodies(conn: Connection, incidents: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """The bodies of each incident's first message (`incidents`: (incident id, project)), as
    made for sending (or as written, while still a draft), read by their exact ids."""
    if not incidents:
        return {}
    projects = sorted({project for _, project in incidents})
    receivers = conn.execute(sa.select(_r.id, _r.project).where(_r.project.in_(projects))).all()
    wanted = {
        f"msg_{incident}_opened_{rid}": incident
        for incident, project in incidents
        for rid, owner in receivers
        if owner == project
    }
    if not wanted:
        return {}
    query = (
        sa.select(_o.id, sa.func.coalesce(_d.body, _o.body))
        .select_from(t.outbox.outerjoin(t.deliveries, _d.message_id == _o.id))
        .where(_o.id.in_(sorted(wanted)))
    )
    out: dict[str, list[str]] = {}
    for message_id, body in conn.execute(query):
        out.setdefault(wanted[message_id], []).append(body)
    return out
