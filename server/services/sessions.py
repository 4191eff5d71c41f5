"""Dashboard sessions: a signed cookie naming the token a user signed in with.

The cookie holds the token's id, signed (with an expiry) by a secret the server keeps in its
database; every request turns it back into the token's principal, so revoking the token ends
its sessions at once. It is HttpOnly (scripts cannot read it) and SameSite=Strict (other sites
cannot send it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from itsdangerous import BadSignature, URLSafeTimedSerializer

from server.auth import OPEN, Principal
from server.services.tokens import TokenService

COOKIE = "mm_session"
DEFAULT_TTL_S = 12 * 3600


class Sessions:
    """Issues and reads session cookies."""

    def __init__(
        self,
        tokens: TokenService,
        secret: Callable[[], str],
        *,
        ttl_s: float = DEFAULT_TTL_S,
        secure: bool = False,
    ) -> None:
        """`secret` is read at first use (the database is migrated by then)."""
        self.tokens = tokens
        self.ttl_s = ttl_s
        self.secure = secure
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
        """The Set-Cookie value of a new session of `principal`."""
        value = self.signer.dumps({"t": principal.token_id})
        return self._attributes(value, int(self.ttl_s))

    def cleared(self) -> str:
        return self._attributes("", 0)

    def _attributes(self, value: str, max_age: int) -> str:
        secure = "; Secure" if self.secure else ""
        return f"{COOKIE}={value}; Max-Age={max_age}; Path=/; HttpOnly; SameSite=Strict{secure}"

    def principal(self, value: str | None) -> Principal | None:
        """The signed-in principal of a request, or None (no, bad, expired or revoked session);
        while the server needs no tokens, everyone is the open principal."""
        if not self.tokens.auth_enabled():
            return OPEN
        if not value:
            return None
        try:
            data = self.signer.loads(value, max_age=int(self.ttl_s))
        except BadSignature:
            return None
        token_id = data.get("t") if isinstance(data, dict) else None
        return self.tokens.principal_of(token_id) if isinstance(token_id, str) else None


def cookie_value(header: str | None, name: str) -> str | None:
    """The value of cookie `name` in a Cookie header."""
    for part in (header or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None
