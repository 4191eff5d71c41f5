"""Token management and request authentication over the `tokens` table."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from server import auth
from server.domain.names import NAME_PATTERN
from server.domain.scopes import ALL_PROJECTS, SCOPES
from server.errors import Forbidden, NotFound, Rejected, Unauthorized
from server.storage import tables as t
from server.storage.db import Database

_AUTH_CACHE_S = 2.0


@dataclass(frozen=True)
class TokenInfo:
    id: str
    project: str
    scope: str
    name: str
    created_at: float
    revoked_at: float | None


class TokenService:
    def __init__(self, db: Database, *, require_tokens: bool = False) -> None:
        self._db = db
        self._require = require_tokens
        self._lock = threading.Lock()
        self._any_cache: tuple[float, bool] | None = None

    def create(
        self, *, project: str | None, scope: str, name: str = "", by: auth.Principal = auth.OPEN
    ) -> tuple[TokenInfo, str]:
        """Create a token; returns its info and the full token string (shown once). `by` is who
        asks: a project's admin mints tokens of its own project only; a server-admin token is
        made only where nobody asks (the command line, against the database)."""
        if scope not in SCOPES:
            raise Rejected(f"scope must be one of {', '.join(SCOPES)}")
        if scope == "server-admin":
            if by is not auth.OPEN:
                raise Forbidden(
                    "server-admin tokens are made with `mismatch token create --scope "
                    "server-admin --db …` on the database, not over HTTP"
                )
            project = ALL_PROJECTS
        elif project is None or not re.match(NAME_PATTERN, project):
            raise Rejected("project must be 1-128 characters of letters, digits and _.:/@+-")
        elif not by.is_server_admin and project != by.project:
            raise Forbidden(f"this token administers project {by.project!r}, not {project!r}")
        new = auth.new_token()
        now = time.time()
        with self._db.write() as conn:
            conn.execute(
                sa.insert(t.tokens).values(
                    id=new.id,
                    project=project,
                    scope=scope,
                    name=name[:200],
                    salt=new.salt,
                    hash=new.hash,
                    created_at=now,
                )
            )
        self._any_cache = None
        return TokenInfo(new.id, project, scope, name[:200], now, None), new.token

    def list(
        self,
        *,
        project: str | None = None,
        include_revoked: bool = False,
        projects: Sequence[str] | None = None,
    ) -> list[TokenInfo]:
        """Tokens (never their secrets), of `project` if given, among `projects` (None: all)."""
        c = t.tokens.c
        query = sa.select(c.id, c.project, c.scope, c.name, c.created_at, c.revoked_at)
        if project is not None:
            query = query.where(c.project == project)
        if projects is not None:
            query = query.where(c.project.in_(list(projects)))
        if not include_revoked:
            query = query.where(c.revoked_at.is_(None))
        with self._db.read() as conn:
            rows = conn.execute(query.order_by(c.created_at)).all()
        return [TokenInfo(*r) for r in rows]

    def revoke(self, token_id: str, *, projects: Sequence[str] | None = None) -> TokenInfo:
        """Revoke a token of `projects` (None: any); another project's token is as unknown as
        a missing one."""
        c = t.tokens.c
        with self._db.write() as conn:
            row = conn.execute(sa.select(c.revoked_at, c.project).where(c.id == token_id)).first()
            if row is None or (projects is not None and row.project not in projects):
                raise NotFound(f"no token {token_id!r}; list them with `mismatch token list`")
            if row.revoked_at is None:
                conn.execute(
                    sa.update(t.tokens).where(c.id == token_id).values(revoked_at=time.time())
                )
        self._any_cache = None
        return next(i for i in self.list(include_revoked=True) if i.id == token_id)

    def auth_enabled(self) -> bool:
        """Auth is on when the server requires it or any active token exists."""
        if self._require:
            return True
        now = time.monotonic()
        cached = self._any_cache
        if cached is not None and now - cached[0] < _AUTH_CACHE_S:
            return cached[1]
        with self._db.read() as conn:
            found = conn.execute(
                sa.select(t.tokens.c.id).where(t.tokens.c.revoked_at.is_(None)).limit(1)
            ).first()
        self._any_cache = (now, found is not None)
        return found is not None

    def authenticate(self, authorization: str | None) -> auth.Principal:
        if not self.auth_enabled():
            return auth.OPEN
        if not authorization:
            raise Unauthorized("this server requires a token: send `Authorization: Bearer mm_…`")
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthorized("use `Authorization: Bearer <token>`")
        parts = auth.split_token(value)
        if parts is None:
            raise Unauthorized("malformed token: expected mm_<id>_<secret>")
        token_id, secret = parts
        c = t.tokens.c
        with self._db.read() as conn:
            row = conn.execute(
                sa.select(c.project, c.scope, c.salt, c.hash, c.revoked_at).where(c.id == token_id)
            ).first()
        if row is None or not auth.verify(secret, salt=row.salt, stored_hash=row.hash):
            raise Unauthorized("invalid token")
        if row.revoked_at is not None:
            raise Unauthorized("this token was revoked")
        return auth.Principal(token_id=token_id, project=row.project, scope=row.scope)

    def principal_of(self, token_id: str) -> auth.Principal | None:
        """The principal of an active token, by id: what a signed dashboard session names (so
        revoking the token ends its sessions at once)."""
        with self._db.read() as conn:
            return _principal_row(conn, token_id)


def _principal_row(conn: sa.Connection, token_id: str) -> auth.Principal | None:
    c = t.tokens.c
    row = conn.execute(
        sa.select(c.project, c.scope).where(c.id == token_id, c.revoked_at.is_(None))
    ).first()
    return None if row is None else auth.Principal(token_id, row.project, row.scope)


def require_scope(principal: auth.Principal, scope: str) -> None:
    """Raise Forbidden unless `principal` may act with `scope` (an admin may do what its
    project's other tokens may; where is checked by the project filters)."""
    if principal.is_server_admin or (principal.is_admin and scope != "server-admin"):
        return
    if principal.scope != scope:
        raise Forbidden(f"this token has scope {principal.scope!r}; this needs {scope!r}")
