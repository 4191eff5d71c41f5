"""Incidents over HTTP: the list, one incident's timeline, acknowledging one."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

import server.schemas.alarms  # noqa: F401  # derives AlertOut and SilenceOut, nested here
from server.domain.incidents import (
    Acknowledgement,
    Incident,
    Notification,
    Timeline,
    TimelineEvent,
)
from server.schemas.derive import derived_from

_FROM_DOMAIN = ConfigDict(from_attributes=True)


@derived_from(
    Acknowledgement,
    exclude={"incident_id", "project"},  # the incident it acknowledges carries them
    by=Field(
        description="Who acknowledged, in a form no claim can forge: person:ISSUER#SUBJECT, "
        "token:ID, or open"
    ),
)
class AcknowledgementOut(BaseModel):
    model_config = _FROM_DOMAIN


@derived_from(
    Incident,
    id=Field(description="The id of its first alert"),
    headline=Field(description="Its first cause"),
    severity=Field(description="The worst severity among its alerts"),
    state=Field(description="firing while any of its alerts fires"),
)
class IncidentOut(BaseModel):
    """A run's alerts that fired together: the first cause, the worst severity among them,
    and whether any still fires."""

    model_config = _FROM_DOMAIN


@derived_from(
    Notification,
    receiver=Field(description="Its format and host (never the URL's path)"),
    kind=Field(description="opened, escalated, followup, repeat or ended"),
    diagnosis=Field(description="The diagnosis it carried, in lines"),
)
class NotificationOut(BaseModel):
    model_config = _FROM_DOMAIN


@derived_from(
    TimelineEvent, by=Field(description="Who did it, for an acknowledgement or a silence")
)
class TimelineEventOut(BaseModel):
    model_config = _FROM_DOMAIN


@derived_from(Timeline, silences=Field(description="Silences that cover its alerts"))
class TimelineOut(BaseModel):
    """An incident, its alerts, and everything that happened to it, oldest first."""

    model_config = _FROM_DOMAIN


class AckIn(BaseModel):
    comment: str = Field(default="", max_length=500, description="Why, or what happens next")
