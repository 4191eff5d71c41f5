"""Project settings: /api/v1/projects/{project}/reference, the run alert notifications and the
compare view measure the project's other runs against."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from server.api.deps import AdminDep, ChangesDep, ReaderDep, ServicesDep
from server.domain.names import NAME_PATTERN
from server.schemas.projects import ReferenceIn, ReferenceOut
from server.services.projects import ProjectService

router = APIRouter(prefix="/api/v1", tags=["projects"])

ProjectPath = Annotated[str, Path(pattern=NAME_PATTERN)]


def get_projects(services: ServicesDep) -> ProjectService:
    return services.projects


ProjectsDep = Annotated[ProjectService, Depends(get_projects)]


@router.put("/projects/{project}/reference", response_model=ReferenceOut)
def set_reference(
    project: ProjectPath,
    body: ReferenceIn,
    service: ProjectsDep,
    principal: AdminDep,
    changes: ChangesDep,
) -> ReferenceOut:
    """Make a run of the project its reference run."""
    found = service.set_reference(project, body.run, projects=principal.readable_projects())
    changes.record(
        principal,
        project=project,
        kind="reference",
        object_id=project,
        action="set",
        summary=body.run,
    )
    return ReferenceOut.model_validate(found)


@router.get("/projects/{project}/reference", response_model=ReferenceOut)
def get_reference(project: ProjectPath, service: ProjectsDep, principal: ReaderDep) -> ReferenceOut:
    return ReferenceOut.model_validate(
        service.reference(project, projects=principal.readable_projects())
    )
