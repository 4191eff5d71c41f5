"""A sign-in through the identity provider, from the browser's first click to its session.

`begin` remembers the sign-in (nonce, PKCE verifier, where to go after) under a hash of its
state, on the server, and binds the state to the browser with a short-lived signed cookie
(SameSite=Lax: the provider's redirect back is a cross-site navigation). `finish` accepts the
provider's answer only for a state this browser started, and only once (the row is taken as it
is read, on every replica): a forged state, another browser's and a replayed one find nothing.
The ID token must carry the sign-in's nonce. Then the person gets a session, mapped or not:
what they may see is decided at each request, so a mapping added later needs no new sign-in.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer

from server.errors import Unauthorized
from server.identity.oidc import OidcClient
from server.identity.sessions import UserSessions
from server.storage.db import Database
from server.storage.identity import people as stored

STATE_COOKIE = "mm_oidc"
STATE_PATH = "/login/oidc"
LOGIN_TTL_S = 600


@dataclass(frozen=True)
class Redirect:
    location: str
    cookies: tuple[str, ...]  # Set-Cookie values


class SignIn:
    def __init__(
        self,
        client: OidcClient,
        db: Database,
        sessions: UserSessions,
        secret: Callable[[], str],
        *,
        secure: bool = False,
    ) -> None:
        self.client = client
        self.sessions = sessions
        self.secure = secure
        self._db = db
        self._secret = secret

    def _signer(self) -> URLSafeTimedSerializer:
        return URLSafeTimedSerializer(self._secret(), salt="mismatch-oidc-state")

    def begin(self, next_path: str) -> Redirect:
        """Where to send the browser (the provider), and the cookie that binds the state."""
        started = self.client.begin(next_path)
        now = time.time()
        with self._db.write() as conn:
            expires = now + LOGIN_TTL_S
            stored.create_login(
                conn, state=started.state, login=started.login, now=now, expires_at=expires
            )
        bound = self._signer().dumps(started.state)
        return Redirect(started.url, (self._state_cookie(bound, LOGIN_TTL_S),))

    def finish(self, *, code: str, state: str, bound: str | None) -> Redirect:
        """The person's session and where they were going; Unauthorized for a state this
        browser did not start, one already used or expired, or an ID token that fails."""
        try:
            mine = self._signer().loads(bound or "", max_age=LOGIN_TTL_S)
        except BadSignature:
            mine = None
        if not isinstance(mine, str) or not hmac.compare_digest(mine, state):
            raise Unauthorized("this sign-in was not started in this browser: sign in again")
        with self._db.write() as conn:
            login = stored.take_login(conn, state=state, now=time.time())
        if login is None:
            raise Unauthorized("this sign-in expired or was already used: sign in again")
        person = self.client.finish(code, login)
        session = self.sessions.start(person)
        return Redirect(login.next_path, (session, self.cleared()))

    def cleared(self) -> str:
        return self._state_cookie("", 0)

    def _state_cookie(self, value: str, max_age: int) -> str:
        secure = "; Secure" if self.secure else ""
        return (
            f"{STATE_COOKIE}={value}; Max-Age={max_age}; Path={STATE_PATH}; HttpOnly; "
            f"SameSite=Lax{secure}"
        )
