"""Dashboard sessions: a signed cookie naming a session the server keeps, and the token a user
signed in with.

The cookie holds a random session id and the token's id, signed (with an expiry) by a secret
the server keeps in its database. The session itself is a row in the database
(`server.storage.identity.sessions`), and every request turns the cookie back into the token's
principal only while that row exists: signing out deletes it, so a copied cookie is refused from
then on, by every replica sharing the database; revoking the token ends its sessions at once too.
The cookie is HttpOnly (scripts cannot read it) and SameSite=Strict (other sites cannot send it).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer

from server.auth import OPEN, Principal
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.identity import sessions as stored

COOKIE = "mm_session"
DEFAULT_TTL_S = 12 * 3600


class Sessions:
    """Issues, reads and ends session cookies."""

    def __init__(
        self,
        tokens: TokenService,
        secret: Callable[[], str],
        *,
        db: Database,
        ttl_s: float = DEFAULT_TTL_S,
        secure: bool = False,
    ) -> None:
        """`secret` is read at first use (the database is migrated by then)."""
        self.tokens = tokens
        self.ttl_s = ttl_s
        self.secure = secure
        self._db = db
        self._secret = secret
        self._signer: URLSafeTimedSerializer | None = None
        self._lock = threading.Lock()

    @property
    def signer(self) -> URLSafeTimedSerializer:
        with self._lock:
            if self._signer is None:
                self._signer = URLSafeTimedSerializer(self._secret(), salt="mismatch-session")
            return self._signer

    def cookie(self, principal: Principal) -> str:
        """Start a session of `principal` (a token's); the Set-Cookie value that carries it."""
        if principal.token_id is None:
            raise ValueError("only a token's principal signs in")
        session_id = secrets.token_urlsafe(24)
        now = time.time()
        with self._db.write() as conn:
            stored.create(
                conn,
                session_id=session_id,
                token_id=principal.token_id,
                now=now,
                expires_at=now + self.ttl_s,
            )
        value = self.signer.dumps({"t": principal.token_id, "s": session_id})
        return self._attributes(value, int(self.ttl_s))

    def cleared(self) -> str:
        return self._attributes("", 0)

    def end(self, value: str | None) -> bool:
        """End the session a cookie names (sign-out): from now on that cookie is refused,
        wherever it was copied. Whether there was such a session."""
        data = self._verified(value)
        if data is None:
            return False
        with self._db.write() as conn:
            return stored.delete(conn, session_id=data["s"])

    def _attributes(self, value: str, max_age: int) -> str:
        secure = "; Secure" if self.secure else ""
        return f"{COOKIE}={value}; Max-Age={max_age}; Path=/; HttpOnly; SameSite=Strict{secure}"

    def principal(self, value: str | None) -> Principal | None:
        """The signed-in principal of a request, or None (no, bad, expired, ended or revoked
        session); while the server needs no tokens, everyone is the open principal."""
        if not self.tokens.auth_enabled():
            return OPEN
        data = self._verified(value)
        if data is None:
            return None
        with self._db.read() as conn:
            row = stored.active(conn, session_id=data["s"], token_id=data["t"], now=time.time())
        return None if row is None else Principal(data["t"], row.project, row.scope)

    def _verified(self, value: str | None) -> dict[str, str] | None:
        """The cookie's signed payload when its signature holds and it has not expired."""
        if not value:
            return None
        try:
            data: Any = self.signer.loads(value, max_age=int(self.ttl_s))
        except BadSignature:  # SignatureExpired is one
            return None
        if not isinstance(data, dict):
            return None
        token_id, session_id = data.get("t"), data.get("s")
        if not isinstance(token_id, str) or not isinstance(session_id, str):
            return None  # a cookie of a server without sessions on record: sign in again
        return {"t": token_id, "s": session_id}


def cookie_value(header: str | None, name: str) -> str | None:
    """The value of cookie `name` in a Cookie header."""
    for part in (header or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None
