"""Dependencies as `Annotated` aliases: the services and the caller's identity."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request

from server.alarms.wiring import Alarms
from server.api.callers import AUTHENTICATED
from server.auth import Principal
from server.container import Services
from server.domain.reads.scope import ReadScope
from server.errors import NotFound
from server.identity.changes import Changes
from server.services.ingest import IngestService
from server.services.reads.port import Reads
from server.services.tokens import TokenService, require_scope


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def get_reads(services: ServicesDep) -> Reads:
    return services.reads


def get_ingest(services: ServicesDep) -> IngestService:
    return services.ingest


def get_tokens(services: ServicesDep) -> TokenService:
    return services.tokens


def get_changes(services: ServicesDep) -> Changes:
    """The record of who changed what: each change below records its caller."""
    return services.people.changes


def get_alarms(services: ServicesDep) -> Alarms:
    if services.alarms is None:
        raise NotFound("alarms are disabled on this server")
    return services.alarms


def get_principal(
    request: Request,
    services: ServicesDep,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    """The caller: a bearer token, a person the auth proxy names, or a session's owner."""
    known = getattr(request.state, AUTHENTICATED, None)  # the body budget's check, if made
    if known is not None and known[0] == authorization:
        return known[1]  # type: ignore[no-any-return]
    return services.people.identity.resolve_scope(request.scope).principal


def get_reader(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """A caller that may read: read or admin scope (ingest tokens only write)."""
    if not principal.is_admin:
        require_scope(principal, "read")
    return principal


def get_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """A caller that administers, narrowed to where it does (a person who reads one project
    and administers another acts here on the second only)."""
    require_scope(principal, "admin")
    return principal.as_admin()


def get_scope(
    principal: Annotated[Principal, Depends(get_reader)],
    project: Annotated[
        str | None,
        Query(
            max_length=128,
            description="The runs' project: needed only when projects you can read share a run "
            "id (run ids are unique within a project)",
        ),
    ] = None,
) -> list[str] | None:
    """The projects a read may look in: the reader's, narrowed to `project` when given (to
    none when the reader cannot see it, so its runs are as unknown as missing ones)."""
    return principal.narrowed(project)


ReadsDep = Annotated[Reads, Depends(get_reads)]
IngestDep = Annotated[IngestService, Depends(get_ingest)]
TokensDep = Annotated[TokenService, Depends(get_tokens)]
AlarmsDep = Annotated[Alarms, Depends(get_alarms)]
ChangesDep = Annotated[Changes, Depends(get_changes)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
ReaderDep = Annotated[Principal, Depends(get_reader)]
AdminDep = Annotated[Principal, Depends(get_admin)]
ScopeDep = Annotated[list[str] | None, Depends(get_scope)]


def get_read_scope(projects: ScopeDep) -> ReadScope:
    """`get_scope` as the read services take it."""
    return ReadScope.of(projects)


ReadScopeDep = Annotated[ReadScope, Depends(get_read_scope)]
