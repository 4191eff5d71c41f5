"""Token scopes: what a token may do, and where.

`ingest`, `read` and `admin` act within the token's project; `server-admin` acts across projects
(it manages tokens of every project) and is made only from the command line, against the
database, never over HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Scope = Literal["ingest", "read", "admin", "server-admin"]
SCOPES: tuple[Scope, ...] = ("ingest", "read", "admin", "server-admin")
PROJECT_SCOPES: tuple[Scope, ...] = ("ingest", "read", "admin")
ALL_PROJECTS = "*"  # the project column of a server-admin token

READER_HEADER = "x-mismatch-reader"
"""Set by the server's sign-in gate on every dashboard request (and stripped from what clients
send): JSON `{"projects": null | [names], "signed_in": bool, "who": null | user, "token": null |
id, "roles": null | [[project, role]]}`, the projects the signed-in reader may see, whether a
session stands behind them (false on an open server, where nobody signs in), and who they are:
the person or the token, with their role in each project (null: every project, as a server
admin). The dashboard reads it and shows nothing when it is missing."""


def narrow(allowed: Sequence[str] | None, asked: Sequence[str] | None) -> list[str] | None:
    """The projects both allow (None is "every project"): what a caller may see, narrowed to
    what a request asks for. A project the caller cannot see narrows to none, so its runs are
    as unknown as missing ones."""
    if asked is None:
        return None if allowed is None else list(allowed)
    return [p for p in asked if allowed is None or p in allowed]
