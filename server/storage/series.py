"""Series reads: which series a run has, their latest values, and downsampled step buckets.

Downsampling is step-bucketed in SQL: `max_points` blocks of equal step width, each with
min/max/mean over its finite values, the value at its last step, and counts of NaN, +Inf and
-Inf — so a one-step spike always survives in its block's max and a non-finite value in its
counts. (The same arithmetic, written independently in NumPy, is the reference in the tests.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from server.storage import sql
from server.storage import tables as t

LATEST_WINDOW_STEPS = 10_000


@dataclass(frozen=True)
class SeriesResult:
    """Blocks of one series as plain tuples (thousands per query: a model per block would cost
    more than the query), in the order of `BLOCK_FIELDS`."""

    total_points: int
    width: int
    blocks: list[tuple[Any, ...]]
    times: dict[int, float]


BLOCK_FIELDS = (
    "step",
    "step_end",
    "min",
    "max",
    "mean",
    "last",
    "count",
    "nan",
    "pos_inf",
    "neg_inf",
)

EMPTY = SeriesResult(0, 1, [], {})


def latest_values(
    conn: Connection, dialect: str, runs: Sequence[Any], metrics: Sequence[str]
) -> dict[int, dict[str, tuple[str, float]]]:
    """Value at the largest step of each (run, metric, source), looking back a bounded window."""
    if not runs or not metrics:
        return {}
    p, s = t.points.c, t.series.c
    out: dict[int, dict[str, tuple[str, float]]] = {}
    for run in runs:
        if run.last_step is None:
            continue
        query = (
            sa.select(s.metric, s.source, sql.last_value(dialect, p.value, p.step).label("value"))
            .select_from(t.points.join(t.series, t.series.c.id == p.series_id))
            .where(
                s.run_pk == run.pk,
                s.metric.in_(list(metrics)),
                p.step >= run.last_step - LATEST_WINDOW_STEPS,
            )
            .group_by(s.metric, s.source)
        )
        values: dict[str, tuple[str, float]] = {}
        for row in conn.execute(query):
            if row.metric not in values or row.source == "trainer":
                values[row.metric] = (row.source, float(row.value))
        out[run.pk] = values
    return out


def metric_rows(conn: Connection, run_pk: int) -> list[Any]:
    """Every series of a run with its point count."""
    s, p = t.series.c, t.points.c
    counts = (
        sa.select(p.series_id, sa.func.count().label("n"))
        .where(p.series_id.in_(sa.select(s.id).where(s.run_pk == run_pk)))
        .group_by(p.series_id)
        .subquery()
    )
    query = (
        sa.select(s.metric, s.source, s.actor, sa.func.coalesce(counts.c.n, 0).label("points"))
        .select_from(t.series.outerjoin(counts, counts.c.series_id == s.id))
        .where(s.run_pk == run_pk)
        .order_by(s.metric, s.source, s.actor)
    )
    return list(conn.execute(query).all())


def series_ids(
    conn: Connection, run_pk: int, metric: str, source: str | None, actor: str | None
) -> tuple[str | None, list[int]]:
    """Series of one metric; with no source given, the trainer's when it has one."""
    s = t.series.c
    query = sa.select(s.id, s.source, s.actor).where(s.run_pk == run_pk, s.metric == metric)
    if actor is not None:
        query = query.where(s.actor == actor)
    rows = conn.execute(query).all()
    if source is None:
        sources = {r.source for r in rows}
        source = "trainer" if "trainer" in sources else (min(sources) if sources else None)
    return source, [r.id for r in rows if r.source == source]


def blocks(
    conn: Connection,
    dialect: str,
    *,
    run_pk: int,
    source: str | None,
    sids: Sequence[int],
    step_min: int | None,
    step_max: int | None,
    max_points: int,
) -> SeriesResult:
    p = t.points.c
    where: list[ColumnElement[bool]] = [p.series_id.in_(list(sids))]
    if step_min is not None:
        where.append(p.step >= step_min)
    if step_max is not None:
        where.append(p.step <= step_max)
    span = conn.execute(
        sa.select(
            sa.func.min(p.step).label("lo"),
            sa.func.max(p.step).label("hi"),
            sa.func.count().label("n"),
        ).where(*where)
    ).one()
    if not span.n:
        return EMPTY
    width = sql.block_width(span.lo, span.hi, max_points)
    query = (
        sa.select(
            sa.func.min(p.step),
            sa.func.max(p.step),
            sa.func.min(sql.finite_or_null(p.value)),
            sa.func.max(sql.finite_or_null(p.value)),
            sa.func.avg(sql.finite_or_null(p.value)),
            sql.last_value(dialect, p.value, p.step),
            sa.func.count(),
            sql.count_where(sql.is_nan(p.value)),
            sql.count_where(p.value == sql.INF),
            sql.count_where(p.value == -sql.INF),
        )
        .where(*where)
        .group_by(sql.step_block(p.step, span.lo, width))
        .order_by(sa.func.min(p.step))
    )
    rows = sql.fetch_all(conn, query)
    times = _block_times(conn, run_pk, source, span.lo, span.hi, width)
    return SeriesResult(int(span.n), width, rows, times)


def _block_times(
    conn: Connection, run_pk: int, source: str | None, lo: int, hi: int, width: int
) -> dict[int, float]:
    """Wall time of the last step of each step block (keyed by that step), in one grouped query."""
    s = t.step_records.c
    query = sa.select(sa.func.max(s.step), sa.func.max(s.time)).where(
        s.run_pk == run_pk, s.step.between(lo, hi)
    )
    if source is not None:
        query = query.where(s.source == source)
    grouped = query.group_by(sql.step_block(s.step, lo, width))
    return {int(step): float(tm) for step, tm in sql.fetch_all(conn, grouped)}
