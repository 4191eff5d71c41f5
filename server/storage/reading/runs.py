"""The runs table as the read side reads it: run summaries' rows, a run's actors and GPU
segments, configs and projects (the write path keeps the rows, `server.storage.writing.runs`).

JSON documents (tags, labels, config) are stored as text and parsed by `loads`, so the same code
runs on both databases.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.storage import sql
from server.storage.schema import tables as t

RUN_COLUMNS = (
    t.runs.c.pk,
    t.runs.c.id,
    t.runs.c.project,
    t.runs.c.name,
    t.runs.c.tags,
    t.runs.c.labels,
    t.runs.c.status,
    t.runs.c.created_at,
    t.runs.c.last_seen,
    t.runs.c.last_step,
    t.runs.c.raw_dropped_at,
    t.runs.c.kind,
)
"""What a run summary needs; the config (often the largest column) is read only on demand."""


def rows(
    conn: Connection,
    *,
    project: str | None = None,
    projects: Sequence[str] | None = None,
    text: str | None = None,
    limit: int = 500,
) -> list[Any]:
    """Run summaries' rows, most recently active first."""
    r = t.runs.c
    query = sa.select(*RUN_COLUMNS)
    if project is not None:
        query = query.where(r.project == project)
    if projects is not None:
        query = query.where(r.project.in_(list(projects)))
    if text:
        pattern = f"%{text.lower()}%"
        query = query.where(
            sa.or_(sa.func.lower(r.name).like(pattern), sa.func.lower(r.id).like(pattern))
        )
    query = query.order_by(sa.func.coalesce(r.last_seen, r.created_at).desc(), r.id).limit(limit)
    return list(conn.execute(query).all())


def row(
    conn: Connection, run_id: str, projects: Sequence[str] | None, *, with_config: bool = False
) -> list[Any]:
    """The rows of runs called `run_id` among `projects` (None: all): one, none, or one per
    project that uses the id."""
    columns = (*RUN_COLUMNS, t.runs.c.config) if with_config else RUN_COLUMNS
    query = sa.select(*columns).where(t.runs.c.id == run_id)
    if projects is not None:
        query = query.where(t.runs.c.project.in_(list(projects)))
    return list(conn.execute(query.order_by(t.runs.c.project)).all())


def rows_by_id(
    conn: Connection, run_ids: Sequence[str], projects: Sequence[str] | None
) -> dict[str, list[Any]]:
    """`row` for several ids in one query."""
    if not run_ids:
        return {}
    query = sa.select(*RUN_COLUMNS).where(t.runs.c.id.in_(list(run_ids)))
    if projects is not None:
        query = query.where(t.runs.c.project.in_(list(projects)))
    found: dict[str, list[Any]] = {}
    for row in conn.execute(query.order_by(t.runs.c.project)):
        found.setdefault(row.id, []).append(row)
    return found


def configs(conn: Connection, run_pks: Sequence[int]) -> list[Any]:
    """Id, name, project and config of the given runs: what a comparison of configs needs."""
    if not run_pks:
        return []
    r = t.runs.c
    query = sa.select(r.pk, r.id, r.name, r.project, r.config).where(r.pk.in_(list(run_pks)))
    return list(conn.execute(query).all())


def gpus(conn: Connection, run_pks: Sequence[int]) -> dict[int, list[str]]:
    """The GPU types each run's actors reported, from the actor segments."""
    if not run_pks:
        return {}
    a = t.actors.c
    found = conn.execute(
        sa.select(a.run_pk, a.gpu).where(a.run_pk.in_(list(run_pks)), a.gpu.is_not(None)).distinct()
    ).all()
    out: dict[int, list[str]] = {}
    for run_pk, gpu in found:
        out.setdefault(run_pk, []).append(gpu)
    return {k: sorted(v) for k, v in out.items()}


def actors(conn: Connection, run_pk: int) -> list[Any]:
    """Each actor of a run: its GPU (the latest segment's), first and last step, step count."""
    a = t.actors.c
    query = (
        sa.select(
            a.source,
            a.actor,
            sql.last_value(conn.dialect.name, a.gpu, a.seq, sa.String()).label("gpu"),
            sa.func.min(a.first_step).label("first_step"),
            sa.func.max(a.last_step).label("last_step"),
            sa.func.sum(a.steps).label("steps"),
        )
        .where(a.run_pk == run_pk)
        .group_by(a.source, a.actor)
        .order_by(a.source, a.actor)
    )
    return list(conn.execute(query).all())


def segments(conn: Connection, run_pk: int) -> list[Any]:
    """The run's GPU segments, per actor, in step order (a resume on other hardware is two)."""
    a = t.actors.c
    query = sa.select(t.actors).where(a.run_pk == run_pk).order_by(a.source, a.actor, a.seq)
    return list(conn.execute(query).all())


def projects(conn: Connection) -> list[str]:
    names = {r[0] for r in conn.execute(sa.select(t.projects.c.name))}
    names |= {r[0] for r in conn.execute(sa.select(t.runs.c.project).distinct())}
    return sorted(names)


def loads(text: str | None, default: Any) -> Any:
    return json.loads(text) if text else default
