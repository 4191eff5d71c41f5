"""People and what they may do: who signed in, the mappings of users, e-mail addresses and
groups to project roles, and the record of who changed what. Neutral types; nothing of ours is
imported."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

Role = Literal["read", "admin"]
ROLES: tuple[Role, ...] = ("read", "admin")
MemberKind = Literal["user", "email", "group"]
MEMBER_KINDS: tuple[MemberKind, ...] = ("user", "email", "group")
EVERY_PROJECT = "*"
"""A mapping to this project with the admin role makes a server admin (made only on the
command line, against the database, like a server-admin token)."""

PROXY_ISSUER = "proxy"
"""The issuer of people the auth proxy names (its header is their subject)."""
MAX_ISSUER = MAX_SUBJECT = 255
"""OpenID Connect bounds a subject at 255 ASCII characters; an issuer is held to the same."""
ANY_ISSUER = "*"
"""The issuer of mappings and personal tokens made before people were told apart by issuer:
`*#SUBJECT` names that subject at whichever issuer this server trusts."""


def person_id(issuer: str, subject: str) -> str:
    """A person's stable id, `ISSUER#SUBJECT`: what user mappings name, personal tokens belong
    to and the record of changes shows. An OIDC issuer never holds a "#" (it has no fragment),
    so the first "#" ends it."""
    return f"{issuer}#{subject}"


def split_person_id(value: str) -> tuple[str, str] | None:
    """(issuer, subject) of a person id, None when `value` is not one."""
    issuer, sep, subject = value.partition("#")
    return (issuer, subject) if sep and issuer and subject else None


def legacy_user(name: str) -> tuple[MemberKind, str]:
    """Where a user mapping of the time before issuers lands, without widening it: a name
    with an "@" matched verified e-mails (and proxy names, which count as e-mails), so it
    becomes an e-mail mapping; any other named a subject, so it becomes that subject at any
    trusted issuer. A subject with an "@" loses its match (narrower, never wider)."""
    return ("email", name) if "@" in name else ("user", person_id(ANY_ISSUER, name))


@dataclass(frozen=True)
class Person:
    """Who signed in, as the identity provider or the proxy named them.

    A person is their `issuer` and `subject` (`id`), which nobody but the provider chooses;
    `email` is set only where the provider verified it (mappings of kind email name it);
    `shown` is for display only and never decides access or ownership."""

    issuer: str
    subject: str
    email: str | None
    groups: tuple[str, ...]
    shown: str

    @property
    def id(self) -> str:
        return person_id(self.issuer, self.subject)

    def user_names(self) -> tuple[str, ...]:
        """What user mappings naming this person say: their id, or their subject at any
        issuer (a mapping made before issuers were told apart)."""
        return (self.id, person_id(ANY_ISSUER, self.subject))


@dataclass(frozen=True)
class Member:
    """A user, e-mail address or group mapped to a project with a role."""

    kind: MemberKind
    name: str
    project: str
    role: Role
    created_at: float
    created_by: str


@dataclass(frozen=True)
class Change:
    """One change to a project's configuration, and who made it: `actor` in a form no claim
    can forge (`person:ISSUER#SUBJECT`, `token:ID`, `open`; `name:…` for records kept before
    people had ids, which named them by a shown name), `actor_name` the name shown beside it
    (display only)."""

    id: str
    changed_at: float
    project: str
    kind: str  # rule, receiver, silence, reference, retention, token, member
    object_id: str
    action: str  # create, update, delete, set, run, test
    actor: str
    summary: str
    actor_name: str = ""


PERSONAL_PREFIX = "p"
"""Personal tokens' ids start with it (`mm_p…_…`); machine tokens' ids are hexadecimal, so the
id alone says which kind a presented token is."""


@dataclass(frozen=True)
class PersonalToken:
    """An API token that belongs to a person: it acts with the projects and roles the mappings
    give to that person at each request, so it stops working when they go (never its secret)."""

    id: str
    owner: str  # the person's id, ISSUER#SUBJECT: who may list and revoke it
    email: str | None  # the person's verified e-mail when it was made
    shown: str  # the person's name as shown (display only)
    name: str  # a note to recognise it by
    created_at: float
    created_by: str
    revoked_at: float | None

    @property
    def person(self) -> Person:
        """The person it acts for (groups are known at a sign-in only)."""
        issuer, subject = split_person_id(self.owner) or (ANY_ISSUER, self.owner)
        return Person(issuer, subject, self.email, (), self.shown)


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
    {project: role}) give to `person`: user mappings by their id, e-mail mappings by their
    verified e-mail, group mappings by their groups. Each kind is a namespace of its own: a
    subject that reads like somebody's e-mail address is not that address."""
    names = {
        "user": set(person.user_names()),
        "email": {person.email} if person.email else set(),
        "group": set(person.groups),
    }

    def matches(kind: str, name: str) -> bool:
        return name in names.get(kind, set())

    found = [(m.project, m.role) for m in members if matches(m.kind, m.name)]
    for (kind, name), roles in (extra or {}).items():
        if matches(kind, name):
            found.extend(roles.items())
    return strongest(found)
