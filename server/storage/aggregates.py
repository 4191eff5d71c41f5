"""Aggregate reads across runs: probability-bucket sums and per-GPU distributions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from server.storage import sql
from server.storage import tables as t

GroupBy = Literal["none", "gpu", "actor", "run"]
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def _bucket_group(group_by: GroupBy) -> ColumnElement[Any]:
    if group_by == "gpu":
        return sa.func.coalesce(t.step_records.c.gpu, "unknown")
    if group_by == "actor":
        return t.bucket_rows.c.actor
    if group_by == "run":
        return t.runs.c.id
    return sa.literal_column("'all'")


def _step_range(
    column: ColumnElement[Any], step_min: int | None, step_max: int | None
) -> list[ColumnElement[bool]]:
    where = []
    if step_min is not None:
        where.append(column >= step_min)
    if step_max is not None:
        where.append(column <= step_max)
    return where


def bucket_totals(
    conn: Connection,
    *,
    run_pks: Sequence[int],
    step_min: int | None,
    step_max: int | None,
    group_by: GroupBy,
    basis: str,
) -> list[Any]:
    """Bucket sums over a step range, per group; columns named as `BucketRowOut`'s fields."""
    b = t.bucket_rows.c
    group = _bucket_group(group_by).label("group")
    source = t.bucket_rows.join(t.runs, t.runs.c.pk == b.run_pk)
    if group_by == "gpu":
        r = t.step_records.c
        source = source.outerjoin(
            t.step_records,
            sa.and_(
                r.run_pk == b.run_pk, r.source == b.source, r.actor == b.actor, r.step == b.step
            ),
        )
    keys = [b.idx] if group_by == "none" else [group, b.idx]
    query = (
        sa.select(
            group,
            b.idx,
            sa.func.min(b.lo).label("lo"),
            sa.func.max(b.hi).label("hi"),
            sa.func.sum(b.tokens).label("tokens"),
            sa.func.sum(b.sum_d).label("sum_d"),
            sa.func.sum(b.sum_abs_d).label("sum_abs_d"),
            sa.func.sum(b.sum_k3).label("sum_k3"),
            sa.func.sum(b.sum_reverse_k3).label("sum_reverse_k3"),
            sa.func.sum(b.oob).label("oob"),
            sa.func.count(sa.distinct(sa.tuple_(b.run_pk, b.step))).label("steps"),
            sa.func.count(sa.distinct(sa.tuple_(b.run_pk, b.source, b.actor))).label("actors"),
        )
        .select_from(source)
        .where(
            b.run_pk.in_(list(run_pks)),
            b.basis == basis,
            *_step_range(b.step, step_min, step_max),
        )
        .group_by(*keys)
        .order_by(*keys)
    )
    return list(conn.execute(query).all())


def bucket_blocks(
    conn: Connection,
    *,
    run_pk: int,
    step_min: int | None,
    step_max: int | None,
    basis: str,
    max_points: int,
) -> list[Any]:
    """Bucket sums per block of steps (heatmap cells); columns named as `BucketStepOut`'s."""
    b = t.bucket_rows.c
    where = [b.run_pk == run_pk, b.basis == basis, *_step_range(b.step, step_min, step_max)]
    lo, hi = conn.execute(sa.select(sa.func.min(b.step), sa.func.max(b.step)).where(*where)).one()
    if lo is None:
        return []
    width = sql.block_width(lo, hi, max_points)
    query = (
        sa.select(
            sa.func.min(b.step).label("step"),
            sa.func.max(b.step).label("step_end"),
            sa.func.min(b.lo).label("lo"),
            sa.func.max(b.hi).label("hi"),
            sa.func.sum(b.tokens).label("tokens"),
            sa.func.sum(b.sum_abs_d).label("sum_abs_d"),
            sa.func.sum(b.sum_k3).label("sum_k3"),
            sa.func.sum(b.oob).label("oob"),
        )
        .where(*where)
        .group_by(sql.step_block(b.step, lo, width), b.idx)
        .order_by(sa.func.min(b.step), b.idx)
    )
    return list(conn.execute(query).all())


def hardware_rows(
    conn: Connection, dialect: str, *, metric: str, run_pks: Sequence[int]
) -> list[dict[str, Any]]:
    """Per GPU type: quantiles of a metric over every (actor, step) value of the given runs."""
    if not run_pks:
        return []
    p, s, r = t.points.c, t.series.c, t.step_records.c
    joined = t.points.join(t.series, s.id == p.series_id).join(
        t.step_records,
        sa.and_(r.run_pk == s.run_pk, r.source == s.source, r.actor == s.actor, r.step == p.step),
    )
    gpu = sa.func.coalesce(r.gpu, "unknown").label("gpu")
    finite = sql.is_finite(p.value)
    where = [s.metric == metric, s.run_pk.in_(list(run_pks))]
    counts = conn.execute(
        sa.select(
            gpu,
            sa.func.count(sa.distinct(s.run_pk)).label("runs"),
            sa.func.count(sa.distinct(sa.tuple_(s.run_pk, s.source, s.actor))).label("actors"),
            sql.count_where(finite).label("steps"),
            sql.count_where(sa.not_(finite)).label("nonfinite"),
            sa.func.min(sql.finite_or_null(p.value)).label("min"),
            sa.func.max(sql.finite_or_null(p.value)).label("max"),
            sa.func.avg(sql.finite_or_null(p.value)).label("mean"),
        )
        .select_from(joined)
        .where(*where)
        .group_by(gpu)
        .order_by(gpu)
    ).all()
    by_gpu = {
        row.gpu: list(row.qs or [])
        for row in conn.execute(
            sa.select(gpu, sql.quantiles(dialect, p.value, QUANTILES).label("qs"))
            .select_from(joined)
            .where(*where, finite)
            .group_by(gpu)
        )
    }
    out = []
    for row in counts:
        qs = by_gpu.get(row.gpu) or [None] * len(QUANTILES)
        out.append(
            {
                **row._mapping,
                "metric": metric,
                "steps": int(row.steps or 0),
                "nonfinite": int(row.nonfinite or 0),
                **dict(zip(("p05", "q1", "median", "q3", "p95"), qs, strict=True)),
            }
        )
    return out
