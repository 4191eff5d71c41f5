"""Token management over HTTP, for the CLI while a server holds the database."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from server.api.deps import AdminDep, AlarmsDep, ChangesDep, TokensDep
from server.domain.names import NAME_PATTERN
from server.schemas.reads import ListOut

router = APIRouter(prefix="/api/v1/tokens", tags=["tokens"])


class TokenIn(BaseModel):
    project: str = Field(pattern=NAME_PATTERN, description="An admin mints for its own project")
    scope: Literal["ingest", "read", "admin"] = Field(
        description="server-admin tokens are made only on the command line"
    )
    name: str = Field(default="", max_length=200)


class TokenOut(BaseModel):
    id: str
    project: str
    scope: str
    name: str
    created_at: float
    revoked_at: float | None


class TokenCreatedOut(TokenOut):
    token: str = Field(description="Shown once; store it now")


@router.post("", response_model=TokenCreatedOut, status_code=201)
def create_token(
    body: TokenIn, tokens: TokensDep, alarms: AlarmsDep, principal: AdminDep, changes: ChangesDep
) -> TokenCreatedOut:
    info, token = tokens.create(
        project=body.project, scope=body.scope, name=body.name, by=principal
    )
    changes.record(
        principal,
        project=info.project,
        kind="token",
        object_id=info.id,
        action="create",
        summary=f"{info.scope} {info.name}".strip(),
    )
    alarms.service.ensure_defaults(info.project)  # a project made by its first token
    return TokenCreatedOut(**info.__dict__, token=token)


@router.get("", response_model=ListOut[TokenOut])
def list_tokens(
    tokens: TokensDep,
    principal: AdminDep,
    project: Annotated[str | None, Query(max_length=128)] = None,
    include_revoked: bool = False,
) -> ListOut[TokenOut]:
    found = tokens.list(
        project=project,
        include_revoked=include_revoked,
        projects=principal.readable_projects(),
    )
    data = [TokenOut(**i.__dict__) for i in found]
    return ListOut(data=data, count=len(data))


@router.delete("/{token_id}", response_model=TokenOut)
def revoke_token(
    token_id: str, tokens: TokensDep, principal: AdminDep, changes: ChangesDep
) -> TokenOut:
    revoked = tokens.revoke(token_id, projects=principal.readable_projects())
    changes.record(
        principal,
        project=revoked.project,
        kind="token",
        object_id=token_id,
        action="delete",
        summary=revoked.scope,
    )
    return TokenOut(**revoked.__dict__)
