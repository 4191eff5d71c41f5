"""What the signed-in reader of a request may see, applied to every read the dashboard makes.

The server's sign-in gate puts the reader's projects in a request header (`READER_HEADER`,
stripped from what clients send). `Scoped` wraps the server's query and
alert services and add those projects to each call, intersected with any a page asks for (a
run page opened for one project): the same filter the API applies, on the same code path. A
request without the header sees nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from server.domain.scopes import READER_HEADER, narrow

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


class Scoped:
    """A service (the query service, the alert markers) as the request's reader sees it: each
    call gets `projects=` narrowed to the reader's."""

    def __init__(
        self, inner: Any, projects: Callable[[], list[str] | None] = reader_projects
    ) -> None:
        self._inner = inner
        self._projects = projects

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)
        if not callable(method):
            return method

        def scoped(*args: Any, **kwargs: Any) -> Any:
            kwargs["projects"] = narrow(self._projects(), kwargs.get("projects"))
            return method(*args, **kwargs)

        return scoped
