"""Read queries. Aggregation happens in the database so only small results cross to Python.

The series downsampling is step-bucketed in SQL: `max_points` buckets of equal step width, each
with min/max/mean over its finite values, the value at its last step, and counts of NaN, +Inf and
-Inf — so a one-step spike always survives in its bucket's max and a non-finite value in its
counts. (The same arithmetic, written independently in NumPy, is the reference in the tests.)

Two expressions differ by dialect and live here only: "value at the largest step" (DuckDB
`arg_max`, PostgreSQL an ordered `array_agg`) and quantiles (`quantile_cont` vs
`percentile_cont … WITHIN GROUP`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from server.storage import tables as t

INF = math.inf
LATEST_WINDOW_STEPS = 10_000


@dataclass(slots=True)
class SeriesBucket:
    """Not frozen: thousands are made per series query, and a frozen one costs twice as much."""

    step: int
    step_end: int
    min: float | None
    max: float | None
    mean: float | None
    last: float
    count: int
    nan: int
    pos_inf: int
    neg_inf: int


@dataclass(frozen=True)
class SeriesResult:
    total_points: int
    width: int
    buckets: list[SeriesBucket]
    times: dict[int, float]


def _last_value(
    dialect: str, value: ColumnElement[Any], step: ColumnElement[Any]
) -> ColumnElement[Any]:
    if dialect == "duckdb":
        return sa.func.arg_max(value, step)
    return sa.type_coerce(
        sa.func.array_agg(sa.literal_column(f"{value} ORDER BY {step} DESC")),
        sa.ARRAY(sa.Float(53)),
    )[1]


def fetch_all(conn: Connection, query: sa.Select[Any]) -> list[tuple[Any, ...]]:
    """Rows of an aggregate query as plain tuples.

    On DuckDB the compiled SQL runs on the driver connection directly: SQLAlchemy's per-row
    result processing costs more than the query itself for a thousand-bucket series.
    """
    if conn.dialect.name != "duckdb":
        return [tuple(row) for row in conn.execute(query).all()]
    compiled = query.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    params = compiled.construct_params()
    order = compiled.positiontup or []
    raw: Any = conn.connection.driver_connection
    return list(raw.execute(str(compiled), [params[name] for name in order]).fetchall())


def run_rows(
    conn: Connection,
    *,
    project: str | None = None,
    projects: Sequence[str] | None = None,
    run_ids: Sequence[str] | None = None,
    text: str | None = None,
    limit: int = 500,
) -> list[Any]:
    r = t.runs.c
    query = sa.select(t.runs)
    if project is not None:
        query = query.where(r.project == project)
    if projects is not None:
        query = query.where(r.project.in_(list(projects)))
    if run_ids is not None:
        query = query.where(r.id.in_(list(run_ids)))
    if text:
        pattern = f"%{text.lower()}%"
        query = query.where(
            sa.or_(sa.func.lower(r.name).like(pattern), sa.func.lower(r.id).like(pattern))
        )
    query = query.order_by(sa.func.coalesce(r.last_seen, r.created_at).desc(), r.id).limit(limit)
    return list(conn.execute(query).all())


def run_row(conn: Connection, run_id: str) -> Any | None:
    return conn.execute(sa.select(t.runs).where(t.runs.c.id == run_id)).first()


def run_rows_by_id(conn: Connection, run_ids: Sequence[str]) -> list[Any]:
    r = t.runs.c
    query = sa.select(r.id, r.name, r.project, r.config).where(r.id.in_(list(run_ids)))
    return list(conn.execute(query).all()) if run_ids else []


def run_gpus(conn: Connection, run_pks: Sequence[int]) -> dict[int, list[str]]:
    if not run_pks:
        return {}
    s = t.step_records.c
    rows = conn.execute(
        sa.select(s.run_pk, s.gpu).where(s.run_pk.in_(list(run_pks)), s.gpu.is_not(None)).distinct()
    ).all()
    out: dict[int, list[str]] = {}
    for run_pk, gpu in rows:
        out.setdefault(run_pk, []).append(gpu)
    return {k: sorted(v) for k, v in out.items()}


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
            sa.select(s.metric, s.source, _last_value(dialect, p.value, p.step))
            .select_from(t.points.join(t.series, t.series.c.id == p.series_id))
            .where(
                s.run_pk == run.pk,
                s.metric.in_(list(metrics)),
                p.step >= run.last_step - LATEST_WINDOW_STEPS,
            )
            .group_by(s.metric, s.source)
        )
        values: dict[str, tuple[str, float]] = {}
        for metric, source, value in conn.execute(query):
            if metric not in values or source == "trainer":
                values[metric] = (source, float(value))
        out[run.pk] = values
    return out


def actors(conn: Connection, run_pk: int) -> list[Any]:
    s = t.step_records.c
    query = (
        sa.select(
            s.source,
            s.actor,
            sa.func.max(s.gpu).label("gpu"),
            sa.func.min(s.step).label("first_step"),
            sa.func.max(s.step).label("last_step"),
            sa.func.count().label("steps"),
        )
        .where(s.run_pk == run_pk)
        .group_by(s.source, s.actor)
        .order_by(s.source, s.actor)
    )
    return list(conn.execute(query).all())


def annotation_rows(conn: Connection, run_pk: int, limit: int = 1000) -> list[Any]:
    a = t.run_annotations.c
    query = (
        sa.select(t.run_annotations).where(a.run_pk == run_pk).order_by(a.time, a.id).limit(limit)
    )
    return list(conn.execute(query).all())


def metric_rows(conn: Connection, run_pk: int) -> list[Any]:
    s, p = t.series.c, t.points.c
    counts = (
        sa.select(p.series_id, sa.func.count().label("n"))
        .where(p.series_id.in_(sa.select(s.id).where(s.run_pk == run_pk)))
        .group_by(p.series_id)
        .subquery()
    )
    query = (
        sa.select(s.metric, s.source, s.actor, sa.func.coalesce(counts.c.n, 0))
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


def series_buckets(
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
    lo, hi, total = conn.execute(
        sa.select(sa.func.min(p.step), sa.func.max(p.step), sa.func.count()).where(*where)
    ).one()
    if not total:
        return SeriesResult(0, 1, [], {})
    width = max(1, math.ceil((hi - lo + 1) / max_points))
    bucket = sa.func.floor((p.step - lo) / sa.cast(width, sa.Float(53))).label("b")
    finite = sa.and_(p.value > -INF, p.value < INF)
    value_if_finite = sa.case((finite, p.value))
    query = (
        sa.select(
            sa.func.min(p.step),
            sa.func.max(p.step),
            sa.func.min(value_if_finite),
            sa.func.max(value_if_finite),
            sa.func.avg(value_if_finite),
            _last_value(dialect, p.value, p.step),
            sa.func.count(),
            sa.func.sum(sa.case((p.value > INF, 1), else_=0)),
            sa.func.sum(sa.case((p.value == INF, 1), else_=0)),
            sa.func.sum(sa.case((p.value == -INF, 1), else_=0)),
        )
        .where(*where)
        .group_by(bucket)
        .order_by(sa.func.min(p.step))
    )
    buckets = [
        SeriesBucket(
            int(r[0]),
            int(r[1]),
            _opt(r[2]),
            _opt(r[3]),
            _opt(r[4]),
            float(r[5]),
            int(r[6]),
            int(r[7] or 0),
            int(r[8] or 0),
            int(r[9] or 0),
        )
        for r in fetch_all(conn, query)
    ]
    times = _bucket_times(conn, run_pk, source, lo, hi, width)
    return SeriesResult(int(total), width, buckets, times)


def _bucket_times(
    conn: Connection, run_pk: int, source: str | None, lo: int, hi: int, width: int
) -> dict[int, float]:
    """Wall time of the last step of each step bucket (keyed by that step), in one grouped query."""
    s = t.step_records.c
    block = sa.func.floor((s.step - lo) / sa.cast(width, sa.Float(53)))
    query = sa.select(sa.func.max(s.step), sa.func.max(s.time)).where(
        s.run_pk == run_pk, s.step.between(lo, hi)
    )
    if source is not None:
        query = query.where(s.source == source)
    return {int(step): float(tm) for step, tm in fetch_all(conn, query.group_by(block))}


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)


def _bucket_group(group_by: str) -> ColumnElement[Any]:
    if group_by == "gpu":
        return sa.func.coalesce(t.step_records.c.gpu, "unknown")
    if group_by == "actor":
        return t.bucket_rows.c.actor
    if group_by == "run":
        return t.runs.c.id
    return sa.literal_column("'all'")


def bucket_totals(
    conn: Connection,
    *,
    run_pks: Sequence[int],
    step_min: int | None,
    step_max: int | None,
    group_by: str,
    basis: str,
) -> list[Any]:
    b = t.bucket_rows.c
    group = _bucket_group(group_by).label("grp")
    source = t.bucket_rows.join(t.runs, t.runs.c.pk == b.run_pk)
    if group_by == "gpu":
        r = t.step_records.c
        source = source.outerjoin(
            t.step_records,
            sa.and_(
                r.run_pk == b.run_pk, r.source == b.source, r.actor == b.actor, r.step == b.step
            ),
        )
    where = [b.run_pk.in_(list(run_pks)), b.basis == basis]
    if step_min is not None:
        where.append(b.step >= step_min)
    if step_max is not None:
        where.append(b.step <= step_max)
    query = (
        sa.select(
            group,
            b.idx,
            sa.func.min(b.lo),
            sa.func.max(b.hi),
            sa.func.sum(b.tokens),
            sa.func.sum(b.sum_d),
            sa.func.sum(b.sum_abs_d),
            sa.func.sum(b.sum_k3),
            sa.func.sum(b.sum_reverse_k3),
            sa.func.sum(b.oob),
            sa.func.count(sa.distinct(sa.tuple_(b.run_pk, b.step))),
            sa.func.count(sa.distinct(sa.tuple_(b.run_pk, b.source, b.actor))),
        )
        .select_from(source)
        .where(*where)
        .group_by(*([b.idx] if group_by == "none" else [group, b.idx]))
        .order_by(*([b.idx] if group_by == "none" else [group, b.idx]))
    )
    return list(conn.execute(query).all())


def bucket_blocks(
    conn: Connection,
    dialect: str,
    *,
    run_pk: int,
    step_min: int | None,
    step_max: int | None,
    basis: str,
    max_points: int,
) -> list[Any]:
    b = t.bucket_rows.c
    where = [b.run_pk == run_pk, b.basis == basis]
    if step_min is not None:
        where.append(b.step >= step_min)
    if step_max is not None:
        where.append(b.step <= step_max)
    lo, hi = conn.execute(sa.select(sa.func.min(b.step), sa.func.max(b.step)).where(*where)).one()
    if lo is None:
        return []
    width = max(1, math.ceil((hi - lo + 1) / max_points))
    block = sa.func.floor((b.step - lo) / sa.cast(width, sa.Float(53))).label("blk")
    query = (
        sa.select(
            sa.func.min(b.step),
            sa.func.max(b.step),
            b.idx,
            sa.func.min(b.lo),
            sa.func.max(b.hi),
            sa.func.sum(b.tokens),
            sa.func.sum(b.sum_abs_d),
            sa.func.sum(b.sum_k3),
            sa.func.sum(b.oob),
        )
        .where(*where)
        .group_by(block, b.idx)
        .order_by(sa.func.min(b.step), b.idx)
    )
    return list(conn.execute(query).all())


QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


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
    finite = sa.and_(p.value > -INF, p.value < INF)
    base_where = [s.metric == metric, s.run_pk.in_(list(run_pks))]
    counts = conn.execute(
        sa.select(
            gpu,
            sa.func.count(sa.distinct(s.run_pk)),
            sa.func.count(sa.distinct(sa.tuple_(s.run_pk, s.source, s.actor))),
            sa.func.sum(sa.case((finite, 1), else_=0)),
            sa.func.sum(sa.case((finite, 0), else_=1)),
            sa.func.min(sa.case((finite, p.value))),
            sa.func.max(sa.case((finite, p.value))),
            sa.func.avg(sa.case((finite, p.value))),
        )
        .select_from(joined)
        .where(*base_where)
        .group_by(gpu)
        .order_by(gpu)
    ).all()
    if dialect == "duckdb":
        q_expr: ColumnElement[Any] = sa.func.quantile_cont(p.value, sa.literal(list(QUANTILES)))
    else:
        q_expr = sa.literal_column(
            "percentile_cont(ARRAY[" + ",".join(map(str, QUANTILES)) + "]) "
            "WITHIN GROUP (ORDER BY points.value)"
        )
    quantiles = {
        row[0]: list(row[1] or [])
        for row in conn.execute(
            sa.select(gpu, q_expr).select_from(joined).where(*base_where, finite).group_by(gpu)
        )
    }
    out = []
    for g, runs_n, actors_n, finite_n, nonfinite_n, vmin, vmax, vmean in counts:
        qs = quantiles.get(g) or [None] * len(QUANTILES)
        out.append(
            {
                "gpu": g,
                "metric": metric,
                "runs": int(runs_n),
                "actors": int(actors_n),
                "steps": int(finite_n or 0),
                "nonfinite": int(nonfinite_n or 0),
                "min": _opt(vmin),
                "p05": _opt(qs[0]),
                "q1": _opt(qs[1]),
                "median": _opt(qs[2]),
                "q3": _opt(qs[3]),
                "p95": _opt(qs[4]),
                "max": _opt(vmax),
                "mean": _opt(vmean),
            }
        )
    return out


def projects(conn: Connection) -> list[str]:
    names = {r[0] for r in conn.execute(sa.select(t.projects.c.name))}
    names |= {r[0] for r in conn.execute(sa.select(t.runs.c.project).distinct())}
    return sorted(names)


def loads(text: str | None, default: Any) -> Any:
    if not text:
        return default
    return json.loads(text)
