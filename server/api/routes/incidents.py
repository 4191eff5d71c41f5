"""Incidents: /api/v1/incidents — what fires now and what ended lately, one incident's timeline,
and acknowledging one (which stops its escalations and repeats, and is recorded as a change)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from server.api.deps import ChangesDep, ReaderDep, ReadsDep
from server.auth import Principal
from server.domain.alarms import Severity
from server.domain.incidents import ACK_ACTION, ACK_KIND, IncidentState
from server.errors import Forbidden
from server.schemas.incidents import AckIn, IncidentOut, TimelineOut
from server.schemas.reads import ListOut

router = APIRouter(prefix="/api/v1", tags=["incidents"])

Text = Annotated[str | None, Query(max_length=128)]


@router.get("/incidents", response_model=ListOut[IncidentOut])
def list_incidents(
    reads: ReadsDep,
    principal: ReaderDep,
    project: Text = None,
    run: Text = None,
    state: IncidentState | None = None,
    severity: Severity | None = None,
    label: Annotated[
        str | None, Query(max_length=300, description="A run label filter: KEY, KEY=VALUE or !KEY")
    ] = None,
    ended_within_h: Annotated[
        float, Query(gt=0, le=24 * 90, description="Ended incidents shown: those of the last H")
    ] = 24.0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> ListOut[IncidentOut]:
    """Firing incidents first, then the most severe, then the newest, across the projects the
    caller reads."""
    found = reads.incidents.listed(
        projects=principal.readable_projects(),
        project=project,
        run_id=run,
        state=state,
        severity=severity,
        label=label,
        ended_within_s=ended_within_h * 3600.0,
        limit=limit,
    )
    return ListOut(data=[IncidentOut.model_validate(i) for i in found], count=len(found))


@router.get("/incidents/{incident_id}", response_model=TimelineOut)
def get_incident(incident_id: str, reads: ReadsDep, principal: ReaderDep) -> TimelineOut:
    """The incident's alerts opening and ending, each notification with its receiver, attempts,
    outcome and the diagnosis it carried, and the silences and acknowledgements with who."""
    timeline = reads.incidents.get(incident_id, projects=principal.readable_projects())
    return TimelineOut.model_validate(timeline)


@router.post("/incidents/{incident_id}/ack", response_model=TimelineOut)
def acknowledge_incident(
    incident_id: str,
    body: AckIn,
    reads: ReadsDep,
    principal: ReaderDep,
    changes: ChangesDep,
) -> TimelineOut:
    """Acknowledge a firing incident: its escalations and repeats stop (the message that it
    ended still goes out), and who did it is recorded in the project's activity. Needs the
    admin role (or an admin token) in the incident's project."""
    projects = principal.readable_projects()
    # who may comes first: a read-only caller learns nothing of the incident's state
    found = reads.incidents.get(incident_id, projects=projects).incident
    require_admin_of(principal, found.project, "acknowledge an incident")
    incident = reads.incidents.acknowledge(incident_id, projects=projects)
    changes.record(
        principal,
        project=incident.project,
        kind=ACK_KIND,
        object_id=incident.id,
        action=ACK_ACTION,
        summary=body.comment,
    )
    return TimelineOut.model_validate(reads.incidents.get(incident_id, projects=projects))


def require_admin_of(principal: Principal, project: str, what: str) -> None:
    """Refuse, with what it would take, a caller that reads `project` but does not administer
    it."""
    mine = principal.as_admin().readable_projects() if principal.is_admin else []
    if mine is None or project in mine:
        return
    raise Forbidden(
        f"to {what} in project {project!r} you need its admin role; you may read it only "
        "(ask one of its admins, or use an admin token)"
    )
