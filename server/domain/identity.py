"""People and what they may do: who signed in, the mappings of users and groups to project
roles, and the record of who changed what. Neutral types; nothing of ours is imported."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

Role = Literal["read", "admin"]
ROLES: tuple[Role, ...] = ("read", "admin")
MemberKind = Literal["user", "group"]
MEMBER_KINDS: tuple[MemberKind, ...] = ("user", "group")
EVERY_PROJECT = "*"
"""A mapping to this project with the admin role makes a server admin (made only on the
command line, against the database, like a server-admin token)."""


@dataclass(frozen=True)
class Person:
    """Who signed in, as the identity provider or the proxy named them.

    `names` are what mappings of kind user may name: the OIDC subject and, when the provider
    verified it, the e-mail address; or the proxy's user name. `shown` is what the audit and
    the dashboard print."""

    names: tuple[str, ...]
    groups: tuple[str, ...]
    shown: str


@dataclass(frozen=True)
class Member:
    """A user or group mapped to a project with a role."""

    kind: MemberKind
    name: str
    project: str
    role: Role
    created_at: float
    created_by: str


@dataclass(frozen=True)
class Change:
    """One change to a project's configuration, and who made it."""

    id: str
    changed_at: float
    project: str
    kind: str  # rule, receiver, silence, reference, retention, token, member
    object_id: str
    action: str  # create, update, delete, set, run, test
    actor: str
    summary: str


PERSONAL_PREFIX = "p"
"""Personal tokens' ids start with it (`mm_p…_…`); machine tokens' ids are hexadecimal, so the
id alone says which kind a presented token is."""


@dataclass(frozen=True)
class PersonalToken:
    """An API token that belongs to a person: it acts with the projects and roles the mappings
    give to `names` at each request, so it stops working when they go (never its secret)."""

    id: str
    owner: str  # the person it belongs to, as shown
    names: tuple[str, ...]  # what user mappings may name (subject, verified e-mail)
    name: str  # a note to recognise it by
    created_at: float
    created_by: str
    revoked_at: float | None


def strongest(roles: Iterable[tuple[str, Role]]) -> dict[str, Role]:
    """Per project, the strongest role granted (admin over read)."""
    out: dict[str, Role] = {}
    for project, role in roles:
        if role == "admin" or project not in out:
            out[project] = role
    return out


def grants_of(
    person: Person,
    members: Iterable[Member],
    extra: Mapping[tuple[str, str], Mapping[str, Role]] | None = None,
) -> dict[str, Role]:
    """The projects and roles `members` (and `extra`, a mapping file's (kind, name) →
    {project: role}) give to `person`, by any of their names or groups."""
    names, groups = set(person.names), set(person.groups)

    def matches(kind: str, name: str) -> bool:
        return name in (names if kind == "user" else groups)

    found = [(m.project, m.role) for m in members if matches(m.kind, m.name)]
    for (kind, name), roles in (extra or {}).items():
        if matches(kind, name):
            found.extend(roles.items())
    return strongest(found)
