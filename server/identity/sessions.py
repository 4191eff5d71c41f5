"""Sessions of people signed in through OpenID Connect: the same cookie as a token's session
(`mm_session`: signed, HttpOnly, SameSite=Strict, Secure under https), naming a row the server
keeps, so that signing out ends it on every replica.

A session lasts `ttl_s` from its last refresh and is refreshed while in use: once half of it
has passed, the next request gets a new cookie and the row a later expiry, up to `lifetime_s`
after sign-in, when the person signs in again (and the provider is asked again who they are).
The cookie is signed with a salt of its own, so a token session's cookie never reads as a
person's, nor the other way round. What a person may do is not in the session: it is read
from their mappings at every request (`members`).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, URLSafeSerializer

from server.domain.identity import Person
from server.services.sessions import COOKIE
from server.storage.db import Database
from server.storage.identity import people as stored

LIFETIME_S = 7 * 24 * 3600


@dataclass(frozen=True)
class SessionRead:
    person: Person
    refreshed: str | None  # a Set-Cookie value, when the session was pushed on


class UserSessions:
    def __init__(
        self,
        db: Database,
        secret: Callable[[], str],
        *,
        ttl_s: float,
        secure: bool = False,
        lifetime_s: float = LIFETIME_S,
        clock: Callable[[], float],
    ) -> None:
        """`secret` is read at first use (the database is migrated by then)."""
        self.ttl_s = ttl_s
        self.lifetime_s = max(lifetime_s, ttl_s)
        self.secure = secure
        self._db = db
        self._secret = secret
        self._clock = clock
        self._signer: URLSafeSerializer | None = None
        self._lock = threading.Lock()

    @property
    def signer(self) -> URLSafeSerializer:
        with self._lock:
            if self._signer is None:
                self._signer = URLSafeSerializer(self._secret(), salt="mismatch-person-session")
            return self._signer

    def start(self, person: Person) -> str:
        """Start a session of `person`; the Set-Cookie value that carries it."""
        session_id = secrets.token_urlsafe(24)
        now = self._clock()
        ends_at = now + self.lifetime_s
        with self._db.write() as conn:
            stored.create_session(
                conn,
                session_id=session_id,
                person=person,
                now=now,
                expires_at=now + self.ttl_s,
                ends_at=ends_at,
            )
        return self._cookie(session_id, now, ends_at)

    def read(self, value: str | None) -> SessionRead | None:
        """The person of a session cookie, or None (no, bad, expired or ended session)."""
        data = self._verified(value)
        if data is None:
            return None
        session_id, issued = data
        now = self._clock()
        if now - issued >= self.ttl_s:
            return None  # the cookie outlived its Max-Age: a copy kept past it
        with self._db.read() as conn:
            found = stored.active_session(conn, session_id=session_id, now=now)
        if found is None:
            return None
        refreshed = None
        if now - issued >= self.ttl_s / 2 and found.ends_at - now > 1:
            with self._db.write() as conn:
                expires = min(now + self.ttl_s, found.ends_at)
                stored.extend_session(conn, session_id=session_id, expires_at=expires)
            refreshed = self._cookie(session_id, now, found.ends_at)
        return SessionRead(found.person, refreshed)

    def end(self, value: str | None) -> bool:
        """Sign out: the session's row goes, so every copy of the cookie is refused."""
        data = self._verified(value)
        if data is None:
            return False
        with self._db.write() as conn:
            return stored.delete_session(conn, session_id=data[0])

    def _cookie(self, session_id: str, now: float, ends_at: float) -> str:
        value = self.signer.dumps({"p": session_id, "i": now})
        max_age = int(min(self.ttl_s, ends_at - now))
        secure = "; Secure" if self.secure else ""
        return f"{COOKIE}={value}; Max-Age={max_age}; Path=/; HttpOnly; SameSite=Strict{secure}"

    def _verified(self, value: str | None) -> tuple[str, float] | None:
        if not value:
            return None
        try:
            data: Any = self.signer.loads(value)
        except BadSignature:
            return None
        if not isinstance(data, dict):
            return None
        session_id, issued = data.get("p"), data.get("i")
        if not isinstance(session_id, str) or not isinstance(issued, (int, float)):
            return None
        return session_id, float(issued)
