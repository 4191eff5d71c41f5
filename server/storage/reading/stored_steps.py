"""A run's stored values read back step by step, as the write path stored them (the first value
of each step, metric and actor): what a backtest replays through the alarm rules.

Reads go a block of steps at a time, each block in one statement over the compacted and the hot
values (so a concurrent compaction never shows a value twice or not at all), restricted to the
series of the metrics asked for. Blocks start at stored steps (the next block at the first stored
step past the last one), never walk the numbers between them: a run whose steps jump to 2^53
costs what it stores.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.deadlines import Deadline
from server.domain.records import StoredRecord
from server.errors import Conflict
from server.storage import sql
from server.storage.db import Database
from server.storage.schema import tables as t
from server.storage.writing import runs

BLOCK_STEPS = 4096

_VALUES = sql.text(
    "SELECT series_id, step, value FROM points "
    "WHERE metric_id IN :metric_ids AND series_id IN :sids AND step BETWEEN :lo AND :hi "
    "UNION ALL SELECT series_id, step, value FROM points_hot "
    "WHERE series_id IN :sids AND step BETWEEN :lo AND :hi",
    "sids",
    "metric_ids",
)


@dataclass(frozen=True)
class StoredRun:
    """What a replay needs to know of a run before reading its values."""

    run: runs.RunRef
    series: dict[int, tuple[str, str, str]]  # series id → (source, actor, metric)
    metric_ids: list[int]
    first_step: int | None
    last_step: int | None
    raw_dropped_until: int | None  # retention dropped raw values up to here (None: none)


def find(
    conn: Connection,
    run_id: str,
    metrics: Collection[str] | None = None,
    projects: Sequence[str] | None = None,
) -> StoredRun | None:
    """The run and its series of `metrics` (all when None); None when `projects` (None: all)
    hold no run of that id. Run ids are per project: several answers are a Conflict."""
    found = [
        r
        for r in runs.load(conn, [run_id]).get(run_id, [])
        if projects is None or r.project in projects
    ]
    if not found:
        return None
    if len(found) > 1:
        names = ", ".join(r.project for r in found)
        raise Conflict(f"run id {run_id!r} is used in projects {names}; name the project")
    ref = found[0]
    s = t.series.c
    query = sa.select(
        s.id,
        s.source,
        s.actor,
        s.metric,
        s.metric_id,
        s.first_step,
        s.last_step,
        s.raw_dropped_until,
    ).where(s.run_pk == ref.pk, s.points > 0)
    if metrics is not None:
        query = query.where(s.metric.in_(sorted(metrics)))
    rows = conn.execute(query).all()
    dropped = [r.raw_dropped_until for r in rows if r.raw_dropped_until is not None]
    return StoredRun(
        ref,
        {r.id: (r.source, r.actor, r.metric) for r in rows},
        sorted({r.metric_id for r in rows}),
        min((r.first_step for r in rows), default=None),
        max((r.last_step for r in rows), default=None),
        max(dropped, default=None),
    )


def records(
    db: Database,
    stored: StoredRun,
    *,
    block: int = BLOCK_STEPS,
    deadline: Deadline | None = None,
) -> Iterator[StoredRecord]:
    """Every stored step record of the run that holds a value of its series, in step order (then
    source and actor), a block of steps per read; each block starts at a stored step, so the
    reads are at most one per stored step however far apart the steps are. `deadline` is checked
    before each read."""
    if stored.first_step is None or stored.last_step is None or not stored.series:
        return
    lo: int | None = stored.first_step
    while lo is not None and lo <= stored.last_step:
        if deadline is not None:
            deadline.check()
        hi = lo + block - 1
        with db.read() as conn:
            found = _block(conn, stored, lo, hi)
            lo = _next_step(conn, stored, hi + 1)
        yield from found


def _next_step(conn: Connection, stored: StoredRun, start: int) -> int | None:
    """The run's first stored step at or after `start` (None: none up to its last step)."""
    r = t.step_records.c
    found = conn.execute(
        sa.select(sa.func.min(r.step)).where(
            r.run_pk == stored.run.pk, r.step >= start, r.step <= stored.last_step
        )
    ).scalar()
    return None if found is None else int(found)


def _block(conn: Connection, stored: StoredRun, lo: int, hi: int) -> list[StoredRecord]:
    params: dict[str, Any] = {
        "sids": sorted(stored.series),
        "metric_ids": stored.metric_ids,
        "lo": lo,
        "hi": hi,
    }
    columns = sql.fetch_columns(conn, _VALUES, params)
    values: dict[tuple[str, str, int], dict[str, float]] = {}
    for sid, step, value in zip(
        columns["series_id"], columns["step"], columns["value"], strict=True
    ):
        source, actor, metric = stored.series[int(sid)]
        values.setdefault((source, actor, int(step)), {})[metric] = float(value)
    if not values:
        return []
    r = t.step_records.c
    rows = conn.execute(
        sa.select(r.source, r.actor, r.step, r.time, r.gpu, r.weight_version).where(
            r.run_pk == stored.run.pk, r.step.between(lo, hi)
        )
    ).all()
    ref = stored.run
    out = [
        StoredRecord(
            ref.id,
            ref.project,
            ref.labels,
            row.source,
            row.actor,
            int(row.step),
            float(row.time),
            row.gpu,
            row.weight_version,
            found,
        )
        for row in rows
        if (found := values.get((row.source, row.actor, int(row.step)))) is not None
    ]
    out.sort(key=lambda rec: (rec.step, rec.source, rec.actor))
    return out


@dataclass(frozen=True)
class AtStep:
    """One step of a run across its actors: the values of some metrics, and weight versions."""

    values: dict[tuple[str, str, str], float]  # (source, actor, metric) → value
    weight_versions: dict[tuple[str, str], int]  # (source, actor) → weight version


def at_step(conn: Connection, run_pk: int, step: int, metrics: Collection[str]) -> AtStep:
    """What the run's actors stored at `step`: values of `metrics`, and weight versions."""
    s = t.series.c
    series = {
        row.id: (row.source, row.actor, row.metric, row.metric_id)
        for row in conn.execute(
            sa.select(s.id, s.source, s.actor, s.metric, s.metric_id).where(
                s.run_pk == run_pk, s.metric.in_(sorted(metrics)), s.points > 0
            )
        )
    }
    values: dict[tuple[str, str, str], float] = {}
    if series:
        params = {
            "sids": sorted(series),
            "metric_ids": sorted({m for *_, m in series.values()}),
            "lo": step,
            "hi": step,
        }
        for row in sql.fetch_text(conn, _VALUES, params):
            source, actor, metric, _ = series[int(row[0])]
            values[(source, actor, metric)] = float(row[2])
    r = t.step_records.c
    versions = {
        (row.source, row.actor): int(row.weight_version)
        for row in conn.execute(
            sa.select(r.source, r.actor, r.weight_version).where(
                r.run_pk == run_pk, r.step == step, r.weight_version.is_not(None)
            )
        )
    }
    return AtStep(values, versions)


def weight_versions(
    conn: Connection, run_pk: int, step_min: int | None, step_max: int | None
) -> dict[int, float]:
    """{first step: weight version} of each weight version the run's records carry within the
    steps asked: one row per version, however long the run."""
    r = t.step_records.c
    query = sa.select(r.weight_version, sa.func.min(r.step)).where(
        r.run_pk == run_pk, r.weight_version.is_not(None)
    )
    if step_min is not None:
        query = query.where(r.step >= step_min)
    if step_max is not None:
        query = query.where(r.step <= step_max)
    rows = conn.execute(query.group_by(r.weight_version)).all()
    return {int(step): float(version) for version, step in rows}
