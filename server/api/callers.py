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

from server.api.middleware import EVERYONE, Caller, Scope
from server.errors import MonitorError
from server.identity.resolver import Identity, Resolved

OPEN = Caller(EVERYONE)
AUTHENTICATED = "authenticated"
"""Where a request's state keeps (Authorization header, principal) once the body budget has
authenticated the request, so the route does not authenticate it a second time."""


class Callers:
    """Tells the caller of a request by its credentials: a bearer token, a person named by
    the auth proxy, or a dashboard session (`server.identity.resolver`)."""

    def __init__(self, identity: Identity) -> None:
        self.identity = identity

    async def __call__(self, scope: Scope) -> Caller:
        try:
            resolved = await anyio.to_thread.run_sync(self.identity.resolve_scope, scope)
        except MonitorError as exc:
            return Caller(None, exc)
        authorization = _authorization(scope)
        # the route's own check reads it instead of the tables again
        scope.setdefault("state", {})[AUTHENTICATED] = (authorization, resolved.principal)
        return caller_of(resolved)


def caller_of(resolved: Resolved) -> Caller:
    """Every token and session of a project is one caller; a person is one of their own."""
    principal = resolved.principal
    person = principal.person.id if principal.person is not None else None
    if principal.is_server_admin and principal.token_id is None and person is None:
        return OPEN
    return Caller(principal.project or person or principal.token_id or EVERYONE)


def _authorization(scope: Scope) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == b"authorization":
            return str(value.decode("latin-1"))
    return None
