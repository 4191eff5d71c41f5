"""People over the API: /api/v1/me, the mappings of users and groups to projects
(/api/v1/members), and the record of who changed what (/api/v1/changes)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from server.api.deps import AdminDep, ChangesDep, ReaderDep, ServicesDep
from server.domain.identity import MemberKind
from server.identity.members import Members
from server.schemas.identity import ChangeOut, GrantOut, MemberIn, MemberOut, MeOut
from server.schemas.reads import ListOut

router = APIRouter(prefix="/api/v1", tags=["people"])

ProjectQuery = Annotated[str | None, Query(max_length=128)]


def get_members(services: ServicesDep) -> Members:
    return services.people.members


MembersDep = Annotated[Members, Depends(get_members)]


@router.get("/me", response_model=MeOut)
def who_am_i(principal: ReaderDep) -> MeOut:
    """Who the server takes you for, and the projects and roles you have."""
    roles = principal.roles()
    projects = None if roles is None else [GrantOut(project=p, role=r) for p, r in roles]
    person = principal.person
    return MeOut(
        actor=principal.actor,
        user=principal.user,
        id=None if person is None else person.id,
        email=None if person is None else person.email,
        server_admin=principal.is_server_admin,
        projects=projects,
    )


@router.get("/members", response_model=ListOut[MemberOut])
def list_members(
    members: MembersDep, principal: AdminDep, project: ProjectQuery = None
) -> ListOut[MemberOut]:
    """The users and groups mapped to the projects you administer."""
    found = members.list(projects=principal.readable_projects(), project=project)
    return ListOut(data=[MemberOut.model_validate(m.__dict__) for m in found], count=len(found))


@router.put("/members", response_model=MemberOut)
def put_member(
    body: MemberIn, members: MembersDep, changes: ChangesDep, principal: AdminDep
) -> MemberOut:
    """Map a user or group to a project you administer, with a role (a mapping already there
    takes the new role). A person's access follows at their next request."""
    member = members.add(**body.model_dump(), by=principal)
    changes.record(
        principal,
        project=member.project,
        kind="member",
        object_id=f"{member.kind}:{member.name}",
        action="set",
        summary=member.role,
    )
    return MemberOut.model_validate(member.__dict__)


@router.delete("/members", status_code=204)
def delete_member(
    members: MembersDep,
    changes: ChangesDep,
    principal: AdminDep,
    kind: Annotated[MemberKind, Query()],
    name: Annotated[str, Query(min_length=1, max_length=511)],
    project: Annotated[str, Query(min_length=1, max_length=128)],
) -> None:
    """Remove a mapping: the person loses that project at their next request."""
    members.remove(kind=kind, name=name, project=project, by=principal)
    changes.record(
        principal, project=project, kind="member", object_id=f"{kind}:{name}", action="delete"
    )


@router.get("/changes", response_model=ListOut[ChangeOut])
def list_changes(
    changes: ChangesDep,
    principal: ReaderDep,
    project: ProjectQuery = None,
    kind: Annotated[str | None, Query(max_length=16)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
) -> ListOut[ChangeOut]:
    """Who changed what in the projects you read, newest first."""
    found = changes.list(
        projects=principal.readable_projects(), project=project, kind=kind, limit=limit
    )
    return ListOut(data=[ChangeOut.model_validate(c.__dict__) for c in found], count=len(found))
