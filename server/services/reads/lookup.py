"""Finding the runs a read names, within the reader's scope: one lookup for every read service,
so a run of another project answers as a missing one everywhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from server.domain.labels import InvalidLabelFilter, LabelFilter, parse_optional
from server.domain.run_filters import InvalidRunFilter, RunConditions
from server.errors import Conflict, NotFound, Rejected
from server.storage.reading import runs


def find(
    conn: Connection, run_id: str, projects: Sequence[str] | None, *, with_config: bool = False
) -> Any:
    """The row of the run `run_id` among `projects` (None: every project), or the error a
    reader gets: NotFound, or Conflict where several of them use the id."""
    return one(run_id, runs.row(conn, run_id, projects, with_config=with_config))


def find_all(conn: Connection, run_ids: Sequence[str], projects: Sequence[str] | None) -> list[Any]:
    """`find` for several runs in one query, in the order asked."""
    found = runs.rows_by_id(conn, run_ids, projects)
    return [one(run_id, found.get(run_id, [])) for run_id in run_ids]


def one(run_id: str, rows: Sequence[Any]) -> Any:
    """The one run a request means. Rows come from the caller's projects only, so a run of
    another project is as unknown as a missing one, and naming the projects that share an id
    tells the caller nothing it could not list."""
    if not rows:
        raise NotFound(f"no run {run_id!r}; list runs with GET /api/v1/runs")
    if len(rows) > 1:
        projects = [r.project for r in rows]
        raise Conflict(
            f"run id {run_id!r} is used in projects {', '.join(projects)}; "
            "add project=<name> to choose",
            detail={"projects": projects},
        )
    return rows[0]


def label_filter(text: str | None) -> LabelFilter | None:
    """A label filter as typed (KEY, KEY=VALUE, KEY=), refused in the reader's words."""
    try:
        return parse_optional(text)
    except InvalidLabelFilter as exc:
        raise Rejected(str(exc)) from exc


def run_conditions(
    *,
    status: str | None = None,
    gpu: str | None = None,
    config: str | None = None,
    since: float | None = None,
    until: float | None = None,
) -> RunConditions:
    """The runs list's conditions as typed (`server.domain.run_filters`), refused naming the
    field at fault."""
    try:
        return RunConditions.parse(status=status, gpu=gpu, config=config, since=since, until=until)
    except InvalidRunFilter as exc:
        raise Rejected(str(exc), detail={"field": exc.field}) from exc
