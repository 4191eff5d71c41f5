"""People over the API: who the caller is, the mappings of users and groups to projects, and
the record of who changed what."""

from __future__ import annotations

from pydantic import BaseModel, Field

from server.domain.identity import MemberKind, Role
from server.domain.names import NAME_PATTERN
from server.schemas.reads import Out


class GrantOut(Out):
    project: str
    role: Role


class MeOut(Out):
    actor: str = Field(
        description="How the record of changes names you: person:ISSUER#SUBJECT, token:… or open"
    )
    user: str | None = Field(description="The signed-in person's name as shown (display only)")
    id: str | None = Field(
        default=None,
        description="The signed-in person's id, ISSUER#SUBJECT: what a user mapping names",
    )
    email: str | None = Field(
        default=None, description="Their e-mail address, where the provider verified it"
    )
    server_admin: bool
    projects: list[GrantOut] | None = Field(
        description="Your projects and roles; None: every project (a server admin)"
    )


class MemberIn(BaseModel):
    kind: MemberKind
    name: str = Field(
        min_length=1,
        max_length=511,
        description="A user's id (ISSUER#SUBJECT, as /api/v1/me shows it; proxy#NAME behind "
        "the auth proxy), a verified e-mail address, or a group",
    )
    project: str = Field(pattern=NAME_PATTERN)
    role: Role


class MemberOut(Out):
    kind: MemberKind
    name: str
    project: str
    role: Role
    created_at: float
    created_by: str = Field(description="Who mapped it; 'file' for the --identity-map file")


class ChangeOut(Out):
    id: str
    changed_at: float
    project: str
    kind: str = Field(description="rule, receiver, silence, reference, retention, token, member")
    object_id: str
    action: str
    actor: str = Field(
        description="Who made the change, in a form no claim can forge: person:ISSUER#SUBJECT, "
        "token:ID, open (name:… for changes recorded before people had ids)"
    )
    actor_name: str = Field(description="The name shown beside actor (display only)")
    summary: str


class PersonalTokenIn(BaseModel):
    name: str = Field(default="", max_length=200, description="A note to recognise it by")


class PersonalTokenOut(Out):
    id: str
    owner: str = Field(description="The id (ISSUER#SUBJECT) of the person it belongs to")
    shown: str = Field(description="That person's name as shown (display only)")
    name: str
    created_at: float
    created_by: str
    revoked_at: float | None


class PersonalTokenCreatedOut(PersonalTokenOut):
    token: str = Field(description="Shown once; store it now")
