"""Each project's reference run: stored by project name and run id (text), so it survives
whatever happens to the runs table's keys."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from server.storage.schema import tables as t


def get(conn: Connection, project: str) -> tuple[str, float] | None:
    """(run id, set at) of the project's reference run, or None."""
    c = t.project_references.c
    row = conn.execute(sa.select(c.run_id, c.set_at).where(c.project == project)).first()
    return None if row is None else (row.run_id, row.set_at)


def put(conn: Connection, project: str, run_id: str, now: float) -> None:
    stmt = pg_insert(t.project_references).values(project=project, run_id=run_id, set_at=now)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["project"],
            set_={"run_id": stmt.excluded.run_id, "set_at": stmt.excluded.set_at},
        )
    )
