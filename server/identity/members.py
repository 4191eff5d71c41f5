"""Who is mapped to which project with which role, and what that makes a person: the
`Principal` a request of theirs carries, built here and nowhere else.

The server admin maps users and groups from the command line or the API, a project's admin
maps them into that project, and a mapping file (`--identity-map`) adds the deployer's. A
person's roles are read at every request, so removing a mapping ends their access at their next
request, whatever session they hold.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence

from server import auth
from server.domain.identity import (
    EVERY_PROJECT,
    MEMBER_KINDS,
    ROLES,
    Member,
    MemberKind,
    Person,
    Role,
    grants_of,
)
from server.domain.names import NAME_PATTERN
from server.errors import Forbidden, NotFound, Rejected
from server.storage import people as stored
from server.storage.db import Database

MAX_NAME = 320


class Members:
    def __init__(
        self, db: Database, *, mapped: Mapping[tuple[str, str], Mapping[str, Role]] | None = None
    ) -> None:
        self._db = db
        self._mapped = dict(mapped or {})

    def add(
        self, *, kind: str, name: str, project: str, role: str, by: auth.Principal = auth.OPEN
    ) -> Member:
        """Map `name` (a user or a group) to `project` with `role`; `by` must administer the
        project. Mapping to every project ("*", admin) makes a server admin: only where nobody
        asks (the command line, against the database)."""
        member_kind, member_role = _kind(kind), _role(role)
        name = name.strip()
        if not name or len(name) > MAX_NAME:
            raise Rejected(f"name must be 1-{MAX_NAME} characters")
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
        names = person.names
        if grants.pop(EVERY_PROJECT, None) == "admin":
            return auth.Principal(None, None, "server-admin", user=person.shown, names=names)
        granted = tuple(sorted(grants.items()))
        return auth.Principal(None, None, "read", user=person.shown, grants=granted, names=names)


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
