"""Who sends a request body, told from its headers before a byte of the body is read.

The in-flight budget (`server.api.middleware`) is shared fairly between callers: a caller is a
project (every token of a project, and every dashboard session signed in with one, is the same
caller), so one team's stalled uploads cannot hold what another team's ingest needs. A request
without valid credentials on a server that needs them is nobody's: it gets only a small fixed
allowance, and the reason it is not authenticated (the 401 its route would answer) travels with
it, to be answered at once when its body could never fit that allowance.
"""

from __future__ import annotations

import anyio

from server.api.middleware import EVERYONE, Caller, Scope, header
from server.auth import Principal
from server.errors import MonitorError, Unauthorized
from server.services.sessions import COOKIE, Sessions, cookie_value
from server.services.tokens import TokenService

OPEN = Caller(EVERYONE)
AUTHENTICATED = "authenticated"
"""Where a request's state keeps (Authorization header, principal) once the body budget has
authenticated the bearer token, so the route does not authenticate it a second time."""


class Callers:
    """Tells the caller of a request by its bearer token or its dashboard session."""

    def __init__(self, tokens: TokenService, sessions: Sessions) -> None:
        self.tokens = tokens
        self.sessions = sessions

    async def __call__(self, scope: Scope) -> Caller:
        authorization = header(scope, b"authorization")
        cookie = cookie_value(header(scope, b"cookie"), COOKIE)
        caller, principal = await anyio.to_thread.run_sync(self._who, authorization, cookie)
        if principal is not None:  # the route's own check reads it instead of the table again
            scope.setdefault("state", {})[AUTHENTICATED] = (authorization, principal)
        return caller

    def identify(self, authorization: str | None, cookie: str | None) -> Caller:
        """Blocking (it may read the tokens table): run it off the event loop."""
        return self._who(authorization, cookie)[0]

    def _who(
        self, authorization: str | None, cookie: str | None
    ) -> tuple[Caller, Principal | None]:
        """The caller, and the principal its bearer token authenticated (if it sent one)."""
        if not self.tokens.auth_enabled():
            return OPEN, None
        refusal: MonitorError | None = None
        if authorization:
            try:
                principal = self.tokens.authenticate(authorization)
            except Unauthorized as exc:
                refusal = exc
            else:
                return Caller(principal.project or principal.token_id or EVERYONE), principal
        if cookie:
            session = self.sessions.principal(cookie)
            if session is not None:
                return Caller(session.project or session.token_id or EVERYONE), None
        if refusal is None:
            try:
                self.tokens.authenticate(None)  # for its message: the 401 the route answers
            except Unauthorized as exc:
                refusal = exc
        return Caller(None, refusal), None
