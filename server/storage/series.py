"""Series reads: which series a run has, their heads, and downsampled step buckets.

A downsampled read of [lo, hi] into at most `max_points` buckets has buckets of W' steps,
aligned to multiples of W' from step 0 (so a live view's buckets do not shift as steps arrive).
W' is a multiple of a rollup level's block width (8, 64, … 8⁶) whenever the range is wide
enough, so that each bucket is a whole number of rollup blocks and the read costs about as many
rows as it draws; values still in the hot table join their buckets raw. Every bucket carries
min/max/mean over its finite values, the value at its last step and the counts of NaN and ±Inf,
so a one-step spike survives in its bucket's max and a non-finite value in its counts — and the
result is the one a full scan of the raw values would give (the tests hold it to an independent
NumPy computation). Only a range narrower than 8 × `max_points` steps reads raw values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.storage import downsampling, sql
from server.storage import tables as t
from server.storage.compaction import LEVELS, width


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


def plan(lo: int, hi: int, max_points: int, *, raw_dropped_until: int | None = None) -> Plan:
    """The bucket width and rollup level for a read of [lo, hi] (see the module docstring)."""
    needed = max(1, math.ceil((hi - lo + 1) / max_points))
    level = max((lv for lv in LEVELS if width(lv) <= needed), default=0)
    rollup_only = False
    if level == 0 and raw_dropped_until is not None and raw_dropped_until >= lo:
        level, rollup_only = 1, True  # the raw values are gone; their 8-step blocks are not
    w = width(level)
    return Plan(lo, hi, math.ceil(needed / w) * w, level, rollup_only)


def latest_values(
    conn: Connection, run_pks: Sequence[int], metrics: Sequence[str]
) -> dict[int, dict[str, float]]:
    """The value at the last step of each metric of each run, from the series heads: the
    trainer's when it has one, else the actor that reported last."""
    if not run_pks or not metrics:
        return {}
    s = t.series.c
    query = (
        sa.select(s.run_pk, s.metric, s.source, s.last_step, s.last_value)
        .where(s.run_pk.in_(list(run_pks)), s.metric.in_(list(metrics)), s.points > 0)
        .order_by(s.run_pk, s.metric, (s.source == "trainer").desc(), s.last_step.desc())
    )
    out: dict[int, dict[str, float]] = {}
    for row in conn.execute(query):
        out.setdefault(row.run_pk, {}).setdefault(row.metric, float(row.last_value))
    return out


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
    conn: Connection, run_pk: int, metrics: Sequence[str]
) -> dict[str, tuple[str | None, list[Any]]]:
    """`find` for several metrics of one run, in one query (the run page's panels)."""
    s = t.series.c
    query = sa.select(s.metric, *HEAD_COLUMNS).where(
        s.run_pk == run_pk, s.metric.in_(list(metrics))
    )
    by_metric: dict[str, list[Any]] = {}
    for row in conn.execute(query):
        by_metric.setdefault(row.metric, []).append(row)
    out = {}
    for metric, rows in by_metric.items():
        sources = {r.source for r in rows}
        source = "trainer" if "trainer" in sources else min(sources)
        out[metric] = (source, [r for r in rows if r.source == source])
    return out


def blocks(
    conn: Connection,
    dialect: str,
    *,
    run_pk: int,
    source: str | None,
    heads: Sequence[Any],
    step_min: int | None,
    step_max: int | None,
    max_points: int,
) -> SeriesResult:
    """A series (the series of `heads`, merged step by step) in buckets (module docstring)."""
    found = [h for h in heads if h.points]
    if not found:
        return EMPTY
    lo = max(step_min if step_min is not None else -1, min(h.first_step for h in found))
    hi = min(step_max if step_max is not None else 2**62, max(h.last_step for h in found))
    if lo > hi:
        return EMPTY
    dropped = max(
        (h.raw_dropped_until for h in found if h.raw_dropped_until is not None), default=None
    )
    p = plan(lo, hi, max_points, raw_dropped_until=dropped)
    params = {"sids": [h.id for h in found], "metric_ids": sorted({h.metric_id for h in found})}
    if p.level == 0:
        parts = _raw_parts(conn, params, lo, hi, cold=True)
        rows = downsampling.buckets(parts, p.bucket)
        times = block_times(conn, run_pk, source, lo, hi, p.bucket)
        rows = [(*r[:-1], times.get(int(r[1]), r[-1])) for r in rows]
    else:
        w = width(p.level)
        rollups = _rollup_parts(conn, params, p.level, lo // w, hi // w)
        hot = _raw_parts(conn, params, lo // w * w, (hi // w + 1) * w - 1, cold=False)
        rows = downsampling.buckets(downsampling.Parts.concat([rollups, hot]), p.bucket)
    total = sum(int(r[6]) for r in rows)
    return SeriesResult(total, p.bucket, rows, p.rollup_only)


def _raw_parts(
    conn: Connection, params: dict[str, Any], lo: int, hi: int, *, cold: bool
) -> downsampling.Parts:
    """Raw values in [lo, hi] as parts: the hot ones (with their times) and, when `cold`, the
    compacted ones."""
    where = "series_id IN :sids AND step BETWEEN :lo AND :hi"
    statement = f"SELECT step, value, time FROM points_hot WHERE {where}"
    if cold:
        statement = (
            "SELECT step, value, CAST(NULL AS DOUBLE PRECISION) AS time FROM points "
            f"WHERE metric_id IN :metric_ids AND {where} UNION ALL {statement}"
        )
    found = sql.fetch_columns(
        conn, sql.text(statement, "sids", "metric_ids"), {**params, "lo": lo, "hi": hi}
    )
    return downsampling.Parts.from_values(found["step"], found["value"], found["time"])


def _rollup_parts(
    conn: Connection, params: dict[str, Any], level: int, block_lo: int, block_hi: int
) -> downsampling.Parts:
    statement = (
        f"SELECT {', '.join(downsampling.FIELDS)} FROM rollups WHERE metric_id IN :metric_ids "
        "AND series_id IN :sids AND level = :level AND block BETWEEN :block_lo AND :block_hi"
    )
    found = sql.fetch_columns(
        conn,
        sql.text(statement, "sids", "metric_ids"),
        {**params, "level": level, "block_lo": block_lo, "block_hi": block_hi},
    )
    return downsampling.Parts.from_columns(found)


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
