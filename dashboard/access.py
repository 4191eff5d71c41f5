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


def reader_signed_in() -> bool:
    """Whether the current request's reader has a session (False on an open server, where
    nobody signs in, and without the header): what decides whether "Sign out" is shown."""
    import flask

    if not flask.has_request_context():
        return False
    try:
        return json.loads(flask.request.headers.get(READER_HEADER, "{}")).get("signed_in") is True
    except (ValueError, AttributeError):
        return False
