"""Retention: the raw values of runs that ended long ago go; what draws them stays.

A run is past the horizon when its last activity is older than it (a run that has not reported
for that long is over, whatever status it last claimed). Its raw values, raw bucket rows and
token exemplars (raw per-token data) are deleted; its rollups, bucket block sums, heads, step
records, annotations and alerts stay, so its charts, overlays and post-mortems still draw —
from rollups, which a series read then says.
Each run is dropped in its own transaction: a long retention never holds ingest up for long.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa

from server.domain.retention import RetentionResult
from server.storage.db import Database
from server.storage.schema import tables as t
from server.storage.writing import compaction, exemplars


def due(
    db: Database, *, older_than_s: float, project: str | None, now: float
) -> list[tuple[int, str]]:
    """(pk, id) of the runs past the horizon whose raw values are still stored."""
    r = t.runs.c
    query = sa.select(r.pk, r.id).where(
        sa.func.coalesce(r.last_seen, r.created_at) < now - older_than_s,
        r.raw_dropped_at.is_(None),
    )
    if project is not None:
        query = query.where(r.project == project)
    with db.read() as conn:
        return [(row.pk, row.id) for row in conn.execute(query.order_by(r.pk))]


def drop_raw(
    db: Database,
    *,
    older_than_s: float,
    project: str | None = None,
    now: float | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> RetentionResult:
    """Drop the raw values of the runs past the horizon (see the module docstring)."""
    now = time.time() if now is None else now
    result = RetentionResult(bytes_before=db.disk_bytes())
    compaction.compact_all(db)  # nothing of theirs may stay behind in the hot tables
    runs = due(db, older_than_s=older_than_s, project=project, now=now)
    for done, (pk, run_id) in enumerate(runs, start=1):
        if not dry_run:
            values, buckets, tokens = _drop_run(db, pk, now)
            result.values += values
            result.bucket_rows += buckets
            result.exemplars += tokens
        result.runs.append(run_id)
        if progress is not None:
            progress(done, len(runs))
    if not dry_run and runs:
        db.checkpoint()
    result.bytes_after = db.disk_bytes()
    return result


def _drop_run(db: Database, run_pk: int, now: float) -> tuple[int, int, int]:
    s = t.series.c
    with db.write() as conn:
        sids = [r.id for r in conn.execute(sa.select(s.id).where(s.run_pk == run_pk))]
        values = 0
        if sids:
            values = conn.execute(
                sa.delete(t.points).where(t.points.c.series_id.in_(sids))
            ).rowcount
        buckets = conn.execute(
            sa.delete(t.bucket_rows).where(t.bucket_rows.c.run_pk == run_pk)
        ).rowcount
        tokens = exemplars.delete_run(conn, run_pk)
        conn.execute(
            sa.update(t.series).where(s.run_pk == run_pk).values(raw_dropped_until=s.last_step)
        )
        conn.execute(sa.update(t.runs).where(t.runs.c.pk == run_pk).values(raw_dropped_at=now))
    return int(values or 0), int(buckets or 0), tokens
