"""Rows of people: project mappings, OIDC sessions and the sign-ins under way. Rights (who may
map whom) are the membership service's; these functions read and write rows in the caller's
transaction. Session ids and states are stored as SHA-256 digests, so the tables alone let
nobody forge a cookie or finish someone's sign-in."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.domain.identity import Member, MemberKind, Person, Role
from server.storage.schema.identity_tables import members, oidc_logins, user_sessions

_m = members.c


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def put_member(conn: Connection, member: Member) -> None:
    """Map a user or group to a project (a mapping already there takes the new role)."""
    key = (_m.kind == member.kind, _m.name == member.name, _m.project == member.project)
    conn.execute(sa.delete(members).where(*key))
    conn.execute(sa.insert(members).values(**member.__dict__))


def delete_member(conn: Connection, *, kind: MemberKind, name: str, project: str) -> bool:
    """Remove a mapping; whether there was one."""
    query = sa.delete(members).where(_m.kind == kind, _m.name == name, _m.project == project)
    return bool(conn.execute(query).rowcount)


def listed_members(
    conn: Connection, *, projects: Sequence[str] | None = None, project: str | None = None
) -> list[Member]:
    """Mappings, among `projects` (None: all) and of `project` if given."""
    query = sa.select(members)
    if projects is not None:
        query = query.where(_m.project.in_(list(projects)))
    if project is not None:
        query = query.where(_m.project == project)
    rows = conn.execute(query.order_by(_m.project, _m.kind, _m.name))
    return [_member(row) for row in rows]


def members_of(conn: Connection, person: Person) -> list[Member]:
    """The mappings that name `person`: user mappings by their id, e-mail mappings by their
    verified e-mail, group mappings by their groups (`grants_of` decides which count)."""
    by_user = sa.and_(_m.kind == "user", _m.name.in_(list(person.user_names())))
    by_group = sa.and_(_m.kind == "group", _m.name.in_(list(person.groups) or [""]))
    named = [by_user, by_group]
    if person.email:
        named.append(sa.and_(_m.kind == "email", _m.name == person.email))
    rows = conn.execute(sa.select(members).where(sa.or_(*named)))
    return [_member(row) for row in rows]


def _member(row: Any) -> Member:
    role: Role = row.role
    return Member(row.kind, row.name, row.project, role, row.created_at, row.created_by)


@dataclass(frozen=True)
class StoredSession:
    person: Person
    expires_at: float
    ends_at: float


def create_session(
    conn: Connection, *, session_id: str, person: Person, now: float, expires_at: float,
    ends_at: float,
) -> None:  # fmt: skip
    """Store a session; expired ones are dropped on the way (they are refused anyway)."""
    s = user_sessions.c
    conn.execute(sa.delete(user_sessions).where(s.expires_at < now))
    conn.execute(
        sa.insert(user_sessions).values(
            id_hash=digest(session_id),
            issuer=person.issuer,
            subject=person.subject,
            email=person.email,
            groups=json.dumps(list(person.groups)),
            shown=person.shown,
            created_at=now,
            expires_at=expires_at,
            ends_at=ends_at,
        )
    )


def active_session(conn: Connection, *, session_id: str, now: float) -> StoredSession | None:
    """The session while it exists and has not expired."""
    s = user_sessions.c
    query = sa.select(user_sessions).where(s.id_hash == digest(session_id), s.expires_at > now)
    row = conn.execute(query).first()
    if row is None:
        return None
    groups = tuple(str(g) for g in json.loads(row.groups))
    person = Person(row.issuer, row.subject, row.email, groups, row.shown)
    return StoredSession(person, row.expires_at, row.ends_at)


def extend_session(conn: Connection, *, session_id: str, expires_at: float) -> None:
    s = user_sessions.c
    query = sa.update(user_sessions).where(s.id_hash == digest(session_id))
    conn.execute(query.values(expires_at=expires_at))


def delete_session(conn: Connection, *, session_id: str) -> bool:
    s = user_sessions.c
    query = sa.delete(user_sessions).where(s.id_hash == digest(session_id))
    return bool(conn.execute(query).rowcount)


@dataclass(frozen=True)
class PendingLogin:
    nonce: str
    verifier: str
    next_path: str


def create_login(
    conn: Connection, *, state: str, login: PendingLogin, now: float, expires_at: float
) -> None:
    """Remember a sign-in sent to the provider; stale ones are dropped on the way."""
    c = oidc_logins.c
    conn.execute(sa.delete(oidc_logins).where(c.expires_at < now))
    conn.execute(
        sa.insert(oidc_logins).values(
            state_hash=digest(state),
            nonce=login.nonce,
            verifier=login.verifier,
            next_path=login.next_path,
            expires_at=expires_at,
        )
    )


def take_login(conn: Connection, *, state: str, now: float) -> PendingLogin | None:
    """The sign-in `state` names, removed as it is read: a state answers once."""
    c = oidc_logins.c
    key = c.state_hash == digest(state)
    row = conn.execute(sa.select(oidc_logins).where(key, c.expires_at > now)).first()
    conn.execute(sa.delete(oidc_logins).where(key))
    return None if row is None else PendingLogin(row.nonce, row.verifier, row.next_path)
