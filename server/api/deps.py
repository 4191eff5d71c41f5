"""Dependencies as `Annotated` aliases: the services and the caller's identity."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from server.auth import Principal
from server.services.ingest import IngestService
from server.services.query import QueryService
from server.services.tokens import TokenService, require_scope


def get_query(request: Request) -> QueryService:
    return request.app.state.services.query  # type: ignore[no-any-return]


def get_ingest(request: Request) -> IngestService:
    return request.app.state.services.ingest  # type: ignore[no-any-return]


def get_tokens(request: Request) -> TokenService:
    return request.app.state.services.tokens  # type: ignore[no-any-return]


def get_principal(
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    return get_tokens(request).authenticate(authorization)


def get_reader(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """A caller that may read: read or admin scope (ingest tokens only write)."""
    if not principal.is_admin:
        require_scope(principal, "read")
    return principal


def get_admin(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    require_scope(principal, "admin")
    return principal


QueryDep = Annotated[QueryService, Depends(get_query)]
IngestDep = Annotated[IngestService, Depends(get_ingest)]
TokensDep = Annotated[TokenService, Depends(get_tokens)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
ReaderDep = Annotated[Principal, Depends(get_reader)]
AdminDep = Annotated[Principal, Depends(get_admin)]
