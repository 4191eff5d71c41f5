"""Series reads: which series a run has, their heads, and downsampled step buckets.

A downsampled read of [lo, hi] into at most `max_points` buckets has buckets of W' steps,
aligned to multiples of W' from step 0 (so a live view's buckets do not shift as steps arrive).
W' is a multiple of a rollup level's block width (8, 64, … 8⁶) whenever the range is wide
enough (a block wider while the aligned buckets would number more than max_points), so that
each bucket is a whole number of rollup blocks and the read costs about as many rows as it
draws. A live view asks for the width it already holds (`bucket`) to extend its buckets.

Values still in the hot table join their buckets raw. Every bucket carries min/max/mean over
its finite values, the value at its last step and the counts of NaN and ±Inf, so a one-step
spike survives in its bucket's max and a non-finite value in its counts — and the result is the
one a full scan of the raw values would give (the tests hold it to an independent NumPy
computation). Only a range narrower than 8 × `max_points` steps reads raw values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.errors import Rejected
from server.storage import downsampling, sql
from server.storage.schema import tables as t
from server.storage.writing.compaction import LEVELS, width


@dataclass(frozen=True)
class SeriesResult:
    """Buckets of one series as plain tuples in the order of `BLOCK_FIELDS` (thousands per
    query: a model per bucket would cost more than the query)."""

    total_points: int
    width: int
    blocks: list[tuple[Any, ...]]
    rollup_only: bool = False  # drawn from rollups because retention dropped the raw values


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
    "time",
)

EMPTY = SeriesResult(0, 1, [])


@dataclass(frozen=True)
class Plan:
    """How to read [lo, hi]: bucket width, and the rollup level whose blocks tile a bucket."""

    lo: int
    hi: int
    bucket: int  # W', steps per bucket
    level: int  # 0: raw values
    rollup_only: bool = False


def plan(
    lo: int,
    hi: int,
    max_points: int,
    *,
    raw_dropped_until: int | None = None,
    bucket: int | None = None,
) -> Plan:
    """The bucket width and rollup level for a read of [lo, hi] (see the module docstring);
    `bucket` asks for a width (a live view extending the buckets it holds), read from the widest
    rollup level that tiles it."""
    if bucket is None:
        needed = max(1, math.ceil((hi - lo + 1) / max_points))
        level = max((lv for lv in LEVELS if width(lv) <= needed), default=0)
    else:
        needed = bucket
        level = max((lv for lv in LEVELS if bucket % width(lv) == 0), default=0)
    rollup_only = False
    if level == 0 and raw_dropped_until is not None and raw_dropped_until >= lo:
        level, rollup_only = 1, True  # the raw values are gone; their 8-step blocks are not
    w = width(level)
    chosen = math.ceil(needed / w) * w
    while bucket is None and hi // chosen - lo // chosen >= max_points:
        chosen += w  # aligned to multiples from step 0, the range straddled one bucket more
    return Plan(lo, hi, chosen, level, rollup_only)


def metric_rows(conn: Connection, run_pk: int) -> list[Any]:
    """Every series of a run with its point count, from the heads."""
    s = t.series.c
    query = (
        sa.select(s.metric, s.source, s.actor, s.points)
        .where(s.run_pk == run_pk)
        .order_by(s.metric, s.source, s.actor)
    )
    return list(conn.execute(query).all())


HEAD_COLUMNS = (
    t.series.c.id,
    t.series.c.source,
    t.series.c.actor,
    t.series.c.metric_id,
    t.series.c.points,
    t.series.c.first_step,
    t.series.c.last_step,
    t.series.c.raw_dropped_until,
)


def find(
    conn: Connection, run_pk: int, metric: str, source: str | None, actor: str | None
) -> tuple[str | None, list[Any]]:
    """The heads of one metric's series (one per actor); with no source given, the trainer's
    when it has one."""
    s = t.series.c
    query = sa.select(*HEAD_COLUMNS).where(s.run_pk == run_pk, s.metric == metric)
    if actor is not None:
        query = query.where(s.actor == actor)
    rows = conn.execute(query).all()
    if source is None:
        sources = {r.source for r in rows}
        source = "trainer" if "trainer" in sources else (min(sources) if sources else None)
    return source, [r for r in rows if r.source == source]


def find_many(
    conn: Connection, run_pks: Sequence[int], metrics: Sequence[str], source: str | None = None
) -> dict[tuple[int, str], tuple[str | None, list[Any]]]:
    """`find` for several metrics of several runs in one query, keyed by (run pk, metric): an
    overlay's runs or a run page's panels."""
    s = t.series.c
    query = sa.select(s.run_pk, s.metric, *HEAD_COLUMNS).where(
        s.run_pk.in_(list(run_pks)), s.metric.in_(list(metrics))
    )
    if source is not None:
        query = query.where(s.source == source)
    grouped: dict[tuple[int, str], list[Any]] = {}
    for row in conn.execute(query):
        grouped.setdefault((row.run_pk, row.metric), []).append(row)
    out: dict[tuple[int, str], tuple[str | None, list[Any]]] = {}
    for key, rows in grouped.items():
        sources = {r.source for r in rows}
        side = "trainer" if "trainer" in sources else min(sources)
        out[key] = (side, [r for r in rows if r.source == side])
    return out


@dataclass(frozen=True)
class Wanted:
    """One series to read: its run and side, its heads (one per actor, merged step by step),
    and the view asked for."""

    run_pk: int
    source: str | None
    heads: Sequence[Any]
    step_min: int | None = None
    step_max: int | None = None
    max_points: int = 1000
    bucket: int | None = None  # a width asked for, instead of one fitting `max_points`


@dataclass(frozen=True)
class _View:
    wanted: Wanted
    sids: list[int]
    metric_ids: list[int]
    plan: Plan


def _view(wanted: Wanted) -> _View | None:
    """The plan of one read, or None when there is nothing in its range."""
    found = [h for h in wanted.heads if h.points]
    if not found:
        return None
    step_min, step_max = wanted.step_min, wanted.step_max
    lo = max(step_min if step_min is not None else -1, min(h.first_step for h in found))
    hi = min(step_max if step_max is not None else 2**62, max(h.last_step for h in found))
    if lo > hi:
        return None
    dropped = max(
        (h.raw_dropped_until for h in found if h.raw_dropped_until is not None), default=None
    )
    chosen = plan(lo, hi, wanted.max_points, raw_dropped_until=dropped, bucket=wanted.bucket)
    if wanted.bucket is not None and hi // chosen.bucket - lo // chosen.bucket >= wanted.max_points:
        raise Rejected(
            f"steps {lo}..{hi} in buckets of {chosen.bucket} steps are more than max_points "
            f"({wanted.max_points}): narrow the range or widen the buckets"
        )
    return _View(wanted, [h.id for h in found], sorted({h.metric_id for h in found}), chosen)


def read(conn: Connection, wanted: Sequence[Wanted]) -> list[SeriesResult]:
    """Several series in buckets, in the order asked. The reads at one rollup level share one
    scan of the rollups and one of the hot values, those of raw values one scan: a run page or
    an overlay costs a few queries, however many series it draws (each query's fixed cost is
    what a thousand-bucket read mostly pays)."""
    views = [_view(w) for w in wanted]
    results = [EMPTY] * len(wanted)
    for level in sorted({v.plan.level for v in views if v is not None}):
        chosen = [i for i, v in enumerate(views) if v is not None and v.plan.level == level]
        at_level = [v for i in chosen if (v := views[i]) is not None]
        found = _raw(conn, at_level) if level == 0 else _rolled_up(conn, at_level, level)
        for i, rows in zip(chosen, found, strict=True):
            results[i] = rows
    return results


def _rolled_up(conn: Connection, views: Sequence[_View], level: int) -> list[SeriesResult]:
    w = width(level)
    first = min(v.plan.lo // w for v in views) * w
    last = (max(v.plan.hi // w for v in views) + 1) * w - 1
    params = _ids(views) | {"lo": first, "hi": last, "level": level}
    rollups = _columns(
        conn,
        f"SELECT series_id, {', '.join(downsampling.FIELDS)} FROM rollups "
        "WHERE metric_id IN :metric_ids AND series_id IN :sids AND level = :level "
        "AND block BETWEEN :block_lo AND :block_hi",
        params | {"block_lo": first // w, "block_hi": last // w},
    )
    hot = _columns(
        conn,
        "SELECT series_id, step, value, time FROM points_hot "
        "WHERE series_id IN :sids AND step BETWEEN :lo AND :hi",
        params,
    )
    out = []
    for v in views:
        lo, hi = v.plan.lo // w * w, (v.plan.hi // w + 1) * w - 1
        parts = downsampling.Parts.concat(
            [
                downsampling.Parts.from_columns(_pick(rollups, v.sids, "step_lo", lo, hi)),
                _values(_pick(hot, v.sids, "step", lo, hi)),
            ]
        )
        rows = downsampling.buckets(parts, v.plan.bucket)
        out.append(SeriesResult(_total(parts), v.plan.bucket, rows, v.plan.rollup_only))
    return out


def _raw(conn: Connection, views: Sequence[_View]) -> list[SeriesResult]:
    params = _ids(views) | {
        "lo": min(v.plan.lo for v in views),
        "hi": max(v.plan.hi for v in views),
    }
    where = "series_id IN :sids AND step BETWEEN :lo AND :hi"
    found = _columns(
        conn,
        "SELECT series_id, step, value, CAST(NULL AS DOUBLE PRECISION) AS time FROM points "
        f"WHERE metric_id IN :metric_ids AND {where} "
        f"UNION ALL SELECT series_id, step, value, time FROM points_hot WHERE {where}",
        params,
    )
    out = []
    times_of: dict[tuple[int, str | None, int, int, int], dict[int, float]] = {}
    for v in views:
        p = v.plan
        parts = _values(_pick(found, v.sids, "step", p.lo, p.hi))
        rows = downsampling.buckets(parts, p.bucket)
        key = (v.wanted.run_pk, v.wanted.source, p.lo, p.hi, p.bucket)
        if key not in times_of:  # a run page's panels share them
            times_of[key] = block_times(conn, *key)
        times = times_of[key]
        rows = [(*r[:-1], times.get(int(r[1]), r[-1])) for r in rows]
        out.append(SeriesResult(_total(parts), p.bucket, rows, p.rollup_only))
    return out


def _total(parts: downsampling.Parts) -> int:
    return int(parts.columns["total"].sum())


def _ids(views: Sequence[_View]) -> dict[str, Any]:
    return {
        "sids": sorted({sid for v in views for sid in v.sids}),
        "metric_ids": sorted({m for v in views for m in v.metric_ids}),
    }


def _columns(conn: Connection, statement: str, params: dict[str, Any]) -> dict[str, np.ndarray]:
    found = sql.fetch_columns(conn, sql.text(statement, "sids", "metric_ids"), params)
    return {name: np.asarray(column) for name, column in found.items()}


def _pick(
    columns: dict[str, np.ndarray], sids: Sequence[int], step: str, lo: int, hi: int
) -> dict[str, np.ndarray]:
    """The rows of one read: its series, its step range."""
    steps = columns[step]
    mask = np.isin(columns["series_id"], sids) & (steps >= lo) & (steps <= hi)
    return {name: column[mask] for name, column in columns.items()}


def _values(columns: dict[str, np.ndarray]) -> downsampling.Parts:
    return downsampling.Parts.from_values(columns["step"], columns["value"], columns["time"])


def block_times(
    conn: Connection, run_pk: int, source: str | None, lo: int, hi: int, bucket: int
) -> dict[int, float]:
    """Wall time of the last step of each bucket (keyed by that step), from the step records:
    the raw path's times (rollups carry their own)."""
    s = t.step_records.c
    query = sa.select(sa.func.max(s.step), sa.func.max(s.time)).where(
        s.run_pk == run_pk, s.step.between(lo, hi)
    )
    if source is not None:
        query = query.where(s.source == source)
    grouped = query.group_by(sa.func.floor(s.step / sa.cast(bucket, sa.Float(53))))
    return {int(step): float(tm) for step, tm in sql.fetch_all(conn, grouped)}
