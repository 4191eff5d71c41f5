"""Incidents over HTTP: the list, one incident's timeline, acknowledging one."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from server.domain.alarms import Severity
from server.domain.incidents import DeliveryOutcome, EventKind, IncidentState
from server.schemas.alarms import AlertOut, SilenceOut

_FROM_DOMAIN = ConfigDict(from_attributes=True)


class AcknowledgementOut(BaseModel):
    model_config = _FROM_DOMAIN

    by: str = Field(
        description="Who acknowledged, in a form no claim can forge: person:ISSUER#SUBJECT, "
        "token:ID, or open"
    )
    at: float
    comment: str


class IncidentOut(BaseModel):
    """A run's alerts that fired together: the first cause, the worst severity among them,
    and whether any still fires."""

    model_config = _FROM_DOMAIN

    id: str = Field(description="The id of its first alert")
    project: str
    run_id: str
    headline: AlertOut = Field(description="Its first cause")
    severity: Severity = Field(description="The worst severity among its alerts")
    state: IncidentState = Field(description="firing while any of its alerts fires")
    alerts: int
    firing: int
    opened_at: float
    ended_at: float | None
    acknowledged: AcknowledgementOut | None


class NotificationOut(BaseModel):
    model_config = _FROM_DOMAIN

    id: str
    receiver_id: str
    receiver: str = Field(description="Its format and host (never the URL's path)")
    kind: str = Field(description="opened, escalated, followup, repeat or ended")
    created_at: float
    attempts: int
    outcome: DeliveryOutcome
    delivered_at: float | None
    last_status: int | None
    last_error: str | None
    diagnosis: list[str] = Field(description="The diagnosis it carried, in lines")


class TimelineEventOut(BaseModel):
    model_config = _FROM_DOMAIN

    at: float
    kind: EventKind
    text: str
    by: str | None = Field(description="Who did it, for an acknowledgement or a silence")
    alert_id: str | None
    notification: NotificationOut | None


class TimelineOut(BaseModel):
    """An incident, its alerts, and everything that happened to it, oldest first."""

    model_config = _FROM_DOMAIN

    incident: IncidentOut
    alerts: list[AlertOut]
    events: list[TimelineEventOut]
    silences: list[SilenceOut] = Field(description="Silences that cover its alerts")


class AckIn(BaseModel):
    comment: str = Field(default="", max_length=500, description="Why, or what happens next")
