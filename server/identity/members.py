"""Who is mapped to which project with which role, and what that makes a person: the
`Principal` a request of theirs carries, built here and nowhere else.

Three kinds of mapping, each a namespace of its own: a user by their id (`ISSUER#SUBJECT`), an
e-mail address (matched only where the provider verified it), a group (the groups claim, the
proxy's groups header). A name a person chooses (`preferred_username`) matches nothing.

The server admin maps users and groups from the command line or the API, a project's admin
maps them into that project, and a mapping file (`--identity-map`) adds the deployer's. A
person's roles are read at every request, so removing a mapping ends their access at their next
request, whatever session they hold.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Mapping, Sequence

from server import auth
from server.domain.identity import (
    EVERY_PROJECT,
    MAX_ISSUER,
    MAX_SUBJECT,
    MEMBER_KINDS,
    PROXY_ISSUER,
    ROLES,
    Member,
    MemberKind,
    Person,
    Role,
    grants_of,
    split_person_id,
)
from server.domain.names import NAME_PATTERN
from server.errors import Forbidden, NotFound, Rejected
from server.storage.db import Database
from server.storage.identity import people as stored

MAX_NAME = MAX_ISSUER + 1 + MAX_SUBJECT


class Members:
    def __init__(
        self, db: Database, *, mapped: Mapping[tuple[str, str], Mapping[str, Role]] | None = None
    ) -> None:
        self._db = db
        self._mapped = dict(mapped or {})

    def add(
        self, *, kind: str, name: str, project: str, role: str, by: auth.Principal = auth.OPEN
    ) -> Member:
        """Map `name` (a user, an e-mail address or a group) to `project` with `role`; `by`
        must administer the project. Mapping to every project ("*", admin) makes a server
        admin: only where nobody asks (the command line, against the database)."""
        member_kind, member_role = _kind(kind), _role(role)
        name = checked_name(member_kind, name)
        if project == EVERY_PROJECT:
            if by is not auth.OPEN:
                raise Forbidden(
                    "server admins are mapped with `mismatch member add --project '*' --db …` "
                    "on the database, not over HTTP"
                )
            if member_role != "admin":
                raise Rejected("every project ('*') is mapped with the admin role only")
        elif not re.match(NAME_PATTERN, project):
            raise Rejected("project must be 1-128 characters of letters, digits and _.:/@+-")
        else:
            _check_admin(by, project)
        member = Member(member_kind, name, project, member_role, time.time(), by.actor)
        with self._db.write() as conn:
            stored.put_member(conn, member)
        return member

    def remove(self, *, kind: str, name: str, project: str, by: auth.Principal = auth.OPEN) -> None:
        """Remove a mapping (another project's is as unknown as a missing one)."""
        member_kind = _kind(kind)
        name = name.strip()
        if project == EVERY_PROJECT and by is not auth.OPEN:
            raise Forbidden("server admins are unmapped on the database, not over HTTP")
        readable = by.as_admin().readable_projects() if by.is_admin else []
        if readable is None or project in readable:
            with self._db.write() as conn:
                if stored.delete_member(conn, kind=member_kind, name=name, project=project):
                    return
        raise NotFound(f"no {kind} {name!r} is mapped to project {project!r}")

    def list(
        self, *, projects: Sequence[str] | None = None, project: str | None = None
    ) -> list[Member]:
        """Mappings among `projects` (None: all), of `project` if given; the mapping file's
        are listed too, with `created_by` "file"."""
        with self._db.read() as conn:
            found = stored.listed_members(conn, projects=projects, project=project)
        for (kind, name), roles in self._mapped.items():
            for where, role in roles.items():
                if (projects is None or where in projects) and project in (None, where):
                    found.append(Member(_kind(kind), name, where, role, 0.0, "file"))
        return found

    def principal(self, person: Person) -> auth.Principal:
        """What `person` may do now: their mappings' projects and roles (none: an empty
        principal, which the resolver refuses)."""
        with self._db.read() as conn:
            found = stored.members_of(conn, person)
        grants = grants_of(person, found, self._mapped)
        shown = person.shown
        if grants.pop(EVERY_PROJECT, None) == "admin":
            return auth.Principal(None, None, "server-admin", user=shown, person=person)
        granted = tuple(sorted(grants.items()))
        return auth.Principal(None, None, "read", user=shown, grants=granted, person=person)


def add_member_hint(person: Person) -> str:
    """What to ask an admin for: the command that maps `person`, naming what the mappings
    match (their id, and their verified e-mail where there is one; never a name they chose)."""
    command = "mismatch member add --kind user --name " + shlex.quote(person.id)
    said = f"ask an admin to run `{command} --project P --role read`"
    if person.email:
        said += f" (or with `--kind email --name {shlex.quote(person.email)}`)"
    return said


def checked_name(kind: MemberKind, name: str) -> str:
    """A mapping's name as its kind needs it: a user by their id (`ISSUER#SUBJECT`, as
    /api/v1/me shows it; `*#SUBJECT` at any trusted issuer), an e-mail address, a group."""
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise Rejected(f"name must be 1-{MAX_NAME} characters")
    if kind == "user":
        parts = split_person_id(name)
        if parts is None or len(parts[0]) > MAX_ISSUER or len(parts[1]) > MAX_SUBJECT:
            raise Rejected(
                f"a user is named by their id, ISSUER#SUBJECT, as GET /api/v1/me shows it "
                f"(e.g. https://sso.example.com#248289761001, or {PROXY_ISSUER}#alice behind "
                f"the auth proxy), not {name[:80]!r}; map a verified e-mail address with "
                "kind email"
            )
    if kind == "email" and "@" not in name:
        raise Rejected(f"an e-mail mapping names an address (with @), not {name[:80]!r}")
    return name


def _check_admin(by: auth.Principal, project: str) -> None:
    readable = by.as_admin().readable_projects() if by.is_admin else []
    if readable is not None and project not in readable:
        raise Forbidden(f"{by.actor} does not administer project {project!r}")


def _kind(kind: str) -> MemberKind:
    for known in MEMBER_KINDS:
        if kind == known:
            return known
    raise Rejected(f"kind must be one of {', '.join(MEMBER_KINDS)}")


def _role(role: str) -> Role:
    for known in ROLES:
        if role == known:
            return known
    raise Rejected(f"role must be one of {', '.join(ROLES)}")
