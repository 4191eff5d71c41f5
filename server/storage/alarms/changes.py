"""The `changes` table: one row per change to a project's configuration, with who made it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.domain.identity import Change
from server.storage.schema.identity_tables import changes

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
    query = _narrowed(sa.select(changes), projects, project, kind, object_ids)
    rows = conn.execute(query.order_by(_c.changed_at.desc(), _c.id).limit(limit))
    return [_change(row) for row in rows]


def latest(
    conn: Connection,
    *,
    projects: Sequence[str] | None,
    project: str | None = None,
    kind: str | None = None,
    limit: int = 500,
) -> list[Change]:
    """Each object's newest change (who changed it last), newest first: one row per object
    however often it changed, so an object changed long ago is not crowded out of the list
    by one changed often."""
    newest = (
        sa.func.row_number()
        .over(
            partition_by=(_c.project, _c.kind, _c.object_id),
            order_by=(_c.changed_at.desc(), _c.id),
        )
        .label("newest")
    )
    ranked = _narrowed(sa.select(changes, newest), projects, project, kind, None).subquery()
    columns = [ranked.c[column.name] for column in changes.columns]
    query = (
        sa.select(*columns)
        .where(ranked.c.newest == 1)
        .order_by(ranked.c.changed_at.desc(), ranked.c.id)
        .limit(limit)
    )
    return [_change(row) for row in conn.execute(query)]


def _change(row: Any) -> Change:
    return Change(
        id=row.id,
        changed_at=row.changed_at,
        project=row.project,
        kind=row.kind,
        object_id=row.object_id,
        action=row.action,
        actor=row.actor,
        summary=row.summary,
        actor_name=row.actor_name or "",
    )


def _narrowed(
    query: sa.Select[Any],
    projects: Sequence[str] | None,
    project: str | None,
    kind: str | None,
    object_ids: Sequence[str] | None,
) -> sa.Select[Any]:
    if projects is not None:
        query = query.where(_c.project.in_(list(projects)))
    if project is not None:
        query = query.where(_c.project == project)
    if kind is not None:
        query = query.where(_c.kind == kind)
    if object_ids is not None:
        query = query.where(_c.object_id.in_(list(object_ids)))
    return query
