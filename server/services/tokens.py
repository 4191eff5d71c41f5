"""Token management and request authentication: who may mint and revoke which token, and who a
presented token makes a request. The rows are `server.storage.identity.tokens`'."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence

from server import auth
from server.domain.names import NAME_PATTERN
from server.domain.scopes import ALL_PROJECTS, SCOPES
from server.domain.tokens import TokenInfo
from server.errors import Forbidden, NotFound, Rejected, Unauthorized
from server.storage.db import Database
from server.storage.identity import tokens as stored

_AUTH_CACHE_S = 2.0


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
        elif not by.is_server_admin and project not in (by.as_admin().readable_projects() or []):
            raise Forbidden(f"{by.actor} does not administer project {project!r}")
        new = auth.new_token()
        now = time.time()
        with self._db.write() as conn:
            stored.insert(
                conn,
                token_id=new.id,
                project=project,
                scope=scope,
                name=name[:200],
                salt=new.salt,
                hash=new.hash,
                created_at=now,
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
        with self._db.read() as conn:
            return stored.listed(
                conn, project=project, projects=projects, include_revoked=include_revoked
            )

    def revoke(self, token_id: str, *, projects: Sequence[str] | None = None) -> TokenInfo:
        """Revoke a token of `projects` (None: any); another project's token is as unknown as
        a missing one."""
        with self._db.write() as conn:
            found = stored.get(conn, token_id)
            if found is None or (projects is not None and found.project not in projects):
                raise NotFound(f"no token {token_id!r}; list them with `mismatch token list`")
            stored.revoke(conn, token_id, now=time.time())
            revoked = stored.get(conn, token_id)
        self._any_cache = None
        assert revoked is not None  # the row was there a statement ago, in this transaction
        return revoked

    def auth_enabled(self) -> bool:
        """Auth is on when the server requires it or any active token exists."""
        if self._require:
            return True
        now = time.monotonic()
        cached = self._any_cache
        if cached is not None and now - cached[0] < _AUTH_CACHE_S:
            return cached[1]
        with self._db.read() as conn:
            found = stored.any_active(conn)
        self._any_cache = (now, found)
        return found

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
        with self._db.read() as conn:
            row = stored.credentials(conn, token_id)
        if row is None or not auth.verify(secret, salt=row.salt, stored_hash=row.hash):
            raise Unauthorized("invalid token")
        if row.revoked_at is not None:
            raise Unauthorized("this token was revoked")
        return auth.Principal(token_id=token_id, project=row.project, scope=row.scope)

    def principal_of(self, token_id: str) -> auth.Principal | None:
        """The principal of an active token, by id: what a signed dashboard session names (so
        revoking the token ends its sessions at once)."""
        with self._db.read() as conn:
            found = stored.active(conn, token_id)
        return None if found is None else auth.Principal(token_id, found.project, found.scope)


def require_scope(principal: auth.Principal, scope: str) -> None:
    """Raise Forbidden unless `principal` may act with `scope` (an admin may do what its
    project's other tokens may; where is checked by the project filters)."""
    if principal.is_server_admin or (principal.is_admin and scope != "server-admin"):
        return
    if principal.scope != scope:
        raise Forbidden(f"this token has scope {principal.scope!r}; this needs {scope!r}")
