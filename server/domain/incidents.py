"""Incidents as a person meets them: a run's alerts that fired together, what was sent about
them and to whom, and who acknowledged or silenced them. Read-side types, shared by the
incident reads, the API and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from server.domain.alarms import Alert, Severity, Silence

IncidentState = Literal["firing", "resolved", "no_data"]
INCIDENT_STATES: tuple[IncidentState, ...] = ("firing", "resolved", "no_data")

ACK_KIND = "incident"
"""An acknowledgement is a change of this kind in the record of changes (action `ACK_ACTION`,
object id the incident's): who acknowledged is whoever made it, and the record is the one every
reader of the project's activity already sees."""
ACK_ACTION = "acknowledge"

DeliveryOutcome = Literal["delivered", "pending", "retrying", "gave_up", "folded"]
EventKind = Literal[
    "alert_fired", "alert_resolved", "alert_no_data", "notification", "ack", "silence"
]


@dataclass(frozen=True)
class Acknowledgement:
    incident_id: str
    project: str
    by: str
    at: float
    comment: str


@dataclass(frozen=True)
class Incident:
    """An incident, summed up from its alerts: the first cause (`headline`), the worst severity
    among them, and whether any still fires."""

    id: str
    project: str
    run_id: str
    headline: Alert
    severity: Severity
    state: IncidentState
    alerts: int
    firing: int
    opened_at: float
    ended_at: float | None
    acknowledged: Acknowledgement | None = None


@dataclass(frozen=True)
class Notification:
    """One message about an incident to one receiver, and how its delivery went."""

    id: str
    receiver_id: str
    receiver: str  # the receiver's format and host, never its URL's path (it may hold a secret)
    kind: str  # opened, escalated, followup, repeat, ended
    created_at: float
    attempts: int
    outcome: DeliveryOutcome
    delivered_at: float | None
    last_status: int | None
    last_error: str | None
    diagnosis: tuple[str, ...]  # the diagnosis as sent, in lines ("" none: none was sent)


@dataclass(frozen=True)
class TimelineEvent:
    at: float
    kind: EventKind
    text: str
    by: str | None = None
    alert_id: str | None = None
    notification: Notification | None = None


@dataclass(frozen=True)
class Timeline:
    incident: Incident
    alerts: tuple[Alert, ...]
    events: tuple[TimelineEvent, ...]
    silences: tuple[Silence, ...] = ()  # those that cover its alerts, ended ones included
