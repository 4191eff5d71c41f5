"""Who reads: the signed-in reader of the current request, as the scope every read takes.

The server's sign-in gate puts the reader's projects in a request header (`READER_HEADER`,
stripped from what clients send). Each callback takes the scope from it (`reader_scope`) and
hands it to the read port explicitly, narrowed to a project where a page asks for one (a run
page opened for one project): the same filter the API applies, on the same code path. A request
without the header sees nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from server.domain.reads.scope import ReadScope
from server.domain.scopes import READER_HEADER

Reader = Callable[[], ReadScope]
"""The scope of the current request's reader (`reader_scope`, or a test's own)."""

NOTHING: list[str] = []


def reader_projects() -> list[str] | None:
    """The projects of the current request's reader (None: every project; [] without one)."""
    # Imported here, not at the top: once Flask is imported its request proxies sit in module
    # namespaces, and code that scans every module (vLLM's kernel registry) trips over them in
    # any process that imports the server beside vLLM.
    import flask

    if not flask.has_request_context():
        return NOTHING
    raw = flask.request.headers.get(READER_HEADER)
    if raw is None:
        return NOTHING
    try:
        projects = json.loads(raw)["projects"]
    except (ValueError, KeyError, TypeError):
        return NOTHING
    if projects is None:
        return None
    return [str(p) for p in projects] if isinstance(projects, list) else NOTHING


def reader_scope() -> ReadScope:
    """The current request's reader as a read scope (none for a request without one)."""
    return ReadScope.of(reader_projects())


@dataclass(frozen=True)
class Badge:
    """Who the current request's reader is, as the page frame names them: a person (`user`)
    or a token (`token`, its id), their role in each project (None: every project, as a
    server admin), and whether a session stands behind them (what makes "Sign out" mean
    something: behind an auth proxy a person is named without one)."""

    user: str | None
    token: str | None
    roles: tuple[tuple[str, str], ...] | None
    signed_in: bool

    def shown(self) -> str:
        """The frame's line: "Signed in as alice@lab (admin of alpha, read of beta)", or "… as
        token 3f2a (read of alpha)"."""
        who = self.user if self.user is not None else f"token {self.token}"
        if self.roles is None:
            where = "admin of every project"
        else:
            where = ", ".join(f"{role} of {project}" for project, role in self.roles)
        return f"Signed in as {who} ({where})" if where else f"Signed in as {who}"


def reader_badge() -> Badge | None:
    """The current request's reader as the page frame names them; None for nobody in
    particular (an open server, where nobody signs in, or a request without the header)."""
    import flask

    if not flask.has_request_context():
        return None
    try:
        said = json.loads(flask.request.headers.get(READER_HEADER, "{}"))
    except ValueError:
        return None
    return badge_of(said) if isinstance(said, dict) else None


def badge_of(said: dict[str, Any]) -> Badge | None:
    """The badge the reader header's JSON describes (see `READER_HEADER`), or None."""
    user, token = said.get("who"), said.get("token")
    if not isinstance(user, str) and not isinstance(token, str):
        return None
    raw = said.get("roles")
    roles = None
    if raw is not None:
        if not isinstance(raw, list):
            return None
        pairs = [pair for pair in raw if isinstance(pair, list) and len(pair) == 2]
        roles = tuple((str(project), str(role)) for project, role in pairs)
    return Badge(
        user=user if isinstance(user, str) else None,
        token=token if isinstance(token, str) else None,
        roles=roles,
        signed_in=said.get("signed_in") is True,
    )
