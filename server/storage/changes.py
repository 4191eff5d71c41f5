"""The `changes` table: one row per change to a project's configuration, with who made it."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.domain.identity import Change
from server.storage.identity_tables import changes

_c = changes.c


def insert(conn: Connection, change: Change) -> None:
    conn.execute(sa.insert(changes).values(**change.__dict__))


def listed(
    conn: Connection,
    *,
    projects: Sequence[str] | None,
    project: str | None = None,
    kind: str | None = None,
    object_ids: Sequence[str] | None = None,
    limit: int = 500,
) -> list[Change]:
    """The newest changes first, among `projects` (None: all), narrowed by what is given."""
    query = sa.select(changes)
    if projects is not None:
        query = query.where(_c.project.in_(list(projects)))
    if project is not None:
        query = query.where(_c.project == project)
    if kind is not None:
        query = query.where(_c.kind == kind)
    if object_ids is not None:
        query = query.where(_c.object_id.in_(list(object_ids)))
    rows = conn.execute(query.order_by(_c.changed_at.desc(), _c.id).limit(limit))
    return [Change(*row) for row in rows]
