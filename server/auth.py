"""Tokens: generation, salted hashing and constant-time verification. Pure; storage is elsewhere.

A token reads `mm_<id>_<secret>`. The id is public (it names the token in lists and lets the
server find its row); only a salted SHA-256 of the secret is stored, and the secret is shown
once, at creation. Secrets are 256 random bits, so a fast hash is enough (no password stretching
is needed for high-entropy secrets).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, replace

from server.domain.identity import Person, Role
from server.domain.scopes import Scope, narrow

PREFIX = "mm"


@dataclass(frozen=True)
class NewToken:
    id: str
    secret: str
    salt: str
    hash: str

    @property
    def token(self) -> str:
        return f"{PREFIX}_{self.id}_{self.secret}"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's project and scope, a person's projects and roles, or everyone
    when auth is off.

    A person (`person` set; `user` is their name as shown, for display only) has the scope
    "read" and their roles in `grants`, (project, role) pairs: they read every project mapped
    to them and administer those where the role is admin (`as_admin` narrows to those). They
    never ingest: that is for tokens."""

    token_id: str | None
    project: str | None
    scope: Scope
    user: str | None = None
    grants: tuple[tuple[str, Role], ...] | None = None
    person: Person | None = None  # who a person is: issuer and subject, verified e-mail

    @property
    def is_server_admin(self) -> bool:
        """Acts on every project: a server-admin token, or anyone while auth is off."""
        return self.scope == "server-admin"

    @property
    def is_admin(self) -> bool:
        """Administers its project (a server admin administers all of them); a person, when
        any of their projects is mapped to them as admin."""
        if self.grants is not None and self.scope == "read":
            return any(role == "admin" for _, role in self.grants)
        return self.scope in ("admin", "server-admin")

    @property
    def can_read(self) -> bool:
        return self.scope != "ingest"

    @property
    def actor(self) -> str:
        """Who this is in the record of changes, in a form no claim can forge: the person by
        their id (`person:ISSUER#SUBJECT`, also through their own token), the token, or
        nobody (`open`)."""
        if self.person is not None:
            return f"person:{self.person.id}"
        return "open" if self.token_id is None else f"token:{self.token_id}"

    @property
    def actor_name(self) -> str:
        """The name shown beside `actor`: a person's shown name (display only)."""
        return self.person.shown if self.person is not None else ""

    def readable_projects(self) -> list[str] | None:
        """Projects this caller may read and administer; None means all."""
        if self.is_server_admin:
            return None
        if self.grants is not None:
            return sorted(project for project, _ in self.grants)
        return None if self.project is None else [self.project]

    def roles(self) -> list[tuple[str, Role]] | None:
        """Per project, the role this caller has there (None: every project, as a server
        admin): a person's grants, or a token's project with its scope read as a role."""
        if self.is_server_admin:
            return None
        if self.grants is not None:
            return list(self.grants)
        role: Role = "admin" if self.is_admin else "read"
        return [(project, role) for project in self.readable_projects() or []]

    def as_admin(self) -> Principal:
        """This caller where it administers: a person narrowed to their admin projects (a
        token's project and scope already say where it administers)."""
        if self.grants is None or self.is_server_admin:
            return self
        kept = tuple((p, r) for p, r in self.grants if r == "admin")
        return replace(self, grants=kept)

    def narrowed(self, project: str | None) -> list[str] | None:
        """`readable_projects`, narrowed to `project` when one is asked for: a project the
        caller cannot see narrows to none (so its runs are as unknown as missing ones)."""
        return narrow(self.readable_projects(), None if project is None else [project])


OPEN = Principal(token_id=None, project=None, scope="server-admin")


def new_token(*, prefix: str = "") -> NewToken:
    """A new token; `prefix` starts its id (a personal token's "p", never a hexadecimal
    digit, so the id says which kind a token is)."""
    token_id = prefix + secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    return NewToken(token_id, secret, salt, hash_secret(salt, secret))


def hash_secret(salt: str, secret: str) -> str:
    return hashlib.sha256(f"{salt}:{secret}".encode()).hexdigest()


def split_token(token: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed token, else None."""
    parts = token.strip().split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def verify(secret: str, *, salt: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(salt, secret), stored_hash)
