"""Aggregate reads across runs: probability-bucket sums, heatmap cells, per-GPU distributions.

Bucket sums over a whole run come from its 64-step block sums (plus the rows still hot), so a
project's bucket curves cost what its runs' blocks hold, not their every step; a step range
reads the run's sorted raw rows. A value's GPU is its actor's GPU segment at that step (a run
resumed on other hardware counts under each GPU for its own steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.storage import sql
from server.storage.compaction import BUCKET_BLOCK, BUCKET_SUMS, SEGMENT_JOIN

GroupBy = Literal["none", "gpu", "actor", "run"]
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
SUMS = ", ".join(BUCKET_SUMS)

_GROUPS = {
    "gpu": "coalesce(b.gpu, 'unknown')",
    "actor": "b.actor",
    "run": "r.id",
    "none": "'all'",
}


_RAW = (
    "SELECT b.run_pk, b.source, b.actor, b.step, b.basis, b.idx, b.lo, b.hi, "
    + ", ".join(f"b.{s}" for s in BUCKET_SUMS)
    + ", 1 AS steps, a.gpu"
)
_BLOCKS = (
    f"SELECT run_pk, source, actor, step_lo AS step, basis, idx, lo, hi, {SUMS}, steps, gpu "
    "FROM bucket_blocks"
)
_IN_RANGE = "b.step BETWEEN :step_min AND :step_max"
_HOT = f"{_RAW} FROM bucket_hot b {SEGMENT_JOIN} WHERE b.run_pk IN :run_pks AND {_IN_RANGE}"
_BLOCKS_IN_RANGE = "step_hi >= :step_min AND step_lo <= :step_max"


def _bucket_source(step_range: bool) -> str:
    """Bucket sums as partial rows (one per step row, or per 64-step block), always with the
    hot rows: raw rows when a step range is asked — block sums for the runs whose raw rows
    retention dropped (`:dropped`) — else the block sums."""
    if step_range:
        cold = (
            f"{_RAW} FROM bucket_rows b {SEGMENT_JOIN} WHERE b.run_pk IN :run_pks AND {_IN_RANGE} "
            "UNION ALL "
            f"{_BLOCKS} WHERE run_pk IN :dropped AND {_BLOCKS_IN_RANGE}"
        )
    else:
        cold = f"{_BLOCKS} WHERE run_pk IN :run_pks"
    return f"{cold} UNION ALL {_HOT}"


def _params(run_pks: Sequence[int], step_min: int | None, step_max: int | None) -> dict[str, Any]:
    return {
        "run_pks": list(run_pks) or [-1],
        "step_min": -1 if step_min is None else step_min,
        "step_max": 2**62 if step_max is None else step_max,
    }


def bucket_totals(
    conn: Connection,
    *,
    run_pks: Sequence[int],
    dropped: Sequence[int],
    step_min: int | None,
    step_max: int | None,
    group_by: GroupBy,
    basis: str,
) -> list[Any]:
    """Bucket sums over a step range, per group; columns named as `BucketRowOut`'s fields.
    `dropped`: the runs whose raw rows retention dropped (their blocks stand in)."""
    if not run_pks:
        return []
    ranged = step_min is not None or step_max is not None
    group = _GROUPS[group_by]
    keys = "b.idx" if group_by == "none" else f"{group}, b.idx"
    query = sql.text(
        f"SELECT {group} AS grp, b.idx, min(b.lo) AS lo, max(b.hi) AS hi, "
        + ", ".join(f"sum(b.{s}) AS {s}" for s in BUCKET_SUMS)
        + ", sum(b.steps) AS steps, "
        "count(DISTINCT b.run_pk || '|' || b.source || '|' || b.actor) AS actors "
        f"FROM ({_bucket_source(ranged)}) AS b JOIN runs r ON r.pk = b.run_pk "
        f"WHERE b.basis = :basis GROUP BY {keys} ORDER BY {keys}",
        "run_pks",
        "dropped",
    )
    params = {
        **_params(run_pks, step_min, step_max),
        "basis": basis,
        "dropped": list(dropped) or [-1],
    }
    return list(conn.execute(query, params).all())


def bucket_blocks(
    conn: Connection,
    *,
    run_pk: int,
    step_min: int | None,
    step_max: int | None,
    basis: str,
    max_points: int,
    dropped: bool,
) -> list[Any]:
    """Bucket sums per block of steps (heatmap cells), blocks aligned to multiples of their
    width; columns named as `BucketStepOut`'s. Wide views read the 64-step block sums."""
    span = conn.execute(
        sa.text("SELECT min(first_step), max(last_step) FROM actors WHERE run_pk = :run_pk"),
        {"run_pk": run_pk},
    ).one()
    if span[0] is None:
        return []
    lo = max(span[0], step_min if step_min is not None else -1)
    hi = min(span[1], step_max if step_max is not None else 2**62)
    if lo > hi:
        return []
    needed = max(1, -(-(hi - lo + 1) // max_points))
    use_blocks = dropped or needed >= BUCKET_BLOCK
    width = -(-needed // BUCKET_BLOCK) * BUCKET_BLOCK if use_blocks else needed
    if use_blocks:
        source = f"{_BLOCKS} WHERE run_pk IN :run_pks AND {_BLOCKS_IN_RANGE} UNION ALL {_HOT}"
    else:
        source = (
            f"{_RAW} FROM bucket_rows b {SEGMENT_JOIN} WHERE b.run_pk IN :run_pks "
            f"AND {_IN_RANGE} UNION ALL {_HOT}"
        )
    query = sql.text(
        "SELECT min(step) AS step, max(step) AS step_end, min(lo) AS lo, max(hi) AS hi, "
        "sum(tokens) AS tokens, sum(sum_abs_d) AS sum_abs_d, sum(sum_k3) AS sum_k3, "
        f"sum(oob) AS oob FROM ({source}) AS b WHERE basis = :basis "
        f"GROUP BY floor(step / {width}), idx ORDER BY min(step), idx",
        "run_pks",
    )
    params = {**_params([run_pk], lo, hi), "basis": basis}
    return list(conn.execute(query, params).all())


def hardware_rows(
    conn: Connection, dialect: str, *, metric: str, run_pks: Sequence[int]
) -> list[dict[str, Any]]:
    """Per GPU type: counts and quantiles of a metric over the (actor, step) values of the given
    runs. Reads only that metric of those runs (compacted values sit sorted by metric, then
    series) and the rows still hot; a run whose raw values retention dropped contributes the
    means of its 8-step blocks."""
    sids, dropped, metric_id = _metric_series(conn, metric, run_pks)
    if not sids:
        return []
    params = {"sids": sids, "dropped": dropped or [-1], "metric_id": metric_id}
    out = []
    for row in conn.execute(_hardware_query(dialect), params):
        found = list(row.qs or []) or [None] * len(QUANTILES)
        record = {k: v for k, v in row._mapping.items() if k != "qs"}
        out.append(
            {
                **record,
                "metric": metric,
                "steps": int(row.steps or 0),
                "nonfinite": int(row.nonfinite or 0),
                **dict(zip(("p05", "q1", "median", "q3", "p95"), found, strict=True)),
            }
        )
    return out


_HW_VALUES = (
    "SELECT p.series_id, p.step, p.value FROM points p WHERE p.metric_id = :metric_id "
    "AND p.series_id IN :sids UNION ALL SELECT h.series_id, h.step, h.value FROM points_hot h "
    "WHERE h.series_id IN :sids UNION ALL SELECT r.series_id, min(r.step_lo), "
    "sum(r.vsum) / nullif(sum(r.finite), 0) FROM rollups r WHERE r.metric_id = :metric_id "
    "AND r.series_id IN :dropped AND r.level = 1 GROUP BY r.series_id, r.block"
)  # a block's rollup may sit in parts across chunks: one mean per block
# Each series' GPU segments, with how many it has: most series run on one GPU throughout, and
# their values take its name by series alone; only the others are matched by step range.
_HW_SEGMENTS = (
    "SELECT s.id AS sid, s.run_pk, coalesce(a.gpu, 'unknown') AS gpu, a.first_step, "
    "a.last_step, count(*) OVER (PARTITION BY s.id) AS n FROM series s LEFT JOIN actors a "
    "ON a.run_pk = s.run_pk AND a.source = s.source AND a.actor = s.actor WHERE s.id IN :sids"
)
_HW_TAGGED = (
    "SELECT g.gpu, g.run_pk, g.sid, v.step, v.value FROM v JOIN g ON g.sid = v.series_id "
    "WHERE g.n = 1 UNION ALL SELECT g.gpu, g.run_pk, g.sid, v.step, v.value FROM v JOIN g "
    "ON g.sid = v.series_id AND v.step BETWEEN g.first_step AND g.last_step WHERE g.n > 1"
)  # each value with its GPU: its actor's segment at that step
_HW_FINITE = "value > '-Infinity'::DOUBLE PRECISION AND value < 'Infinity'::DOUBLE PRECISION"


def _hardware_query(dialect: str) -> sa.TextClause:
    """Values tagged with their GPU; sums per (GPU, series) first, so that counting runs and
    actors reads a few rows per series, not every value; quantiles over each GPU's values."""
    tagged = _HW_TAGGED
    fin = _HW_FINITE
    per_series = (
        f"SELECT gpu, run_pk, sid, count(*) FILTER (WHERE {fin}) AS steps, "
        f"count(*) FILTER (WHERE NOT ({fin})) AS nonfinite, min(value) FILTER (WHERE {fin}) AS mn, "
        f"max(value) FILTER (WHERE {fin}) AS mx, sum(value) FILTER (WHERE {fin}) AS sm "
        "FROM t GROUP BY gpu, run_pk, sid"
    )
    qs = sql.quantiles_text(dialect, f"CASE WHEN {fin} THEN value END", QUANTILES)
    return sql.text(
        f"WITH v AS ({_HW_VALUES}), g AS ({_HW_SEGMENTS}), t AS MATERIALIZED ({tagged}), "
        f"per AS ({per_series}), q AS (SELECT gpu, {qs} AS qs FROM t GROUP BY gpu) "
        "SELECT per.gpu, count(DISTINCT per.run_pk) AS runs, count(DISTINCT per.sid) AS actors, "
        "sum(per.steps) AS steps, sum(per.nonfinite) AS nonfinite, min(per.mn) AS min, "
        "max(per.mx) AS max, sum(per.sm) / nullif(sum(per.steps), 0) AS mean, q.qs "
        "FROM per JOIN q ON q.gpu = per.gpu GROUP BY per.gpu, q.qs ORDER BY per.gpu",
        "sids",
        "dropped",
    )


def hardware_values(
    conn: Connection, *, metric: str, run_pks: Sequence[int], stride: int = 1
) -> dict[str, Any]:
    """The finite values of a metric in the given runs, each with its GPU (its actor's segment
    at that step), run and step, ordered by run, GPU and step: what a bootstrap over runs and
    blocks of steps resamples. `stride` keeps the steps that are multiples of it (a fixed
    thinning that bounds what a long history sends back). Columns gpu, run_pk, step, value."""
    sids, dropped, metric_id = _metric_series(conn, metric, run_pks)
    if not sids:
        return {"gpu": [], "run_pk": [], "step": [], "value": []}
    query = sql.text(
        f"WITH v AS ({_HW_VALUES}), g AS ({_HW_SEGMENTS}), t AS ({_HW_TAGGED}) "
        f"SELECT gpu, run_pk, step, value FROM t WHERE {_HW_FINITE} AND step % :stride = 0 "
        "ORDER BY run_pk, gpu, step, sid",
        "sids",
        "dropped",
    )
    params = {"sids": sids, "dropped": dropped or [-1], "metric_id": metric_id, "stride": stride}
    return sql.fetch_columns(conn, query, params)


def _metric_series(
    conn: Connection, metric: str, run_pks: Sequence[int]
) -> tuple[list[int], list[int], int]:
    rows = conn.execute(
        sql.text(
            "SELECT id, metric_id, raw_dropped_until FROM series "
            "WHERE metric = :metric AND run_pk IN :run_pks",
            "run_pks",
        ),
        {"metric": metric, "run_pks": list(run_pks)},
    ).all()
    if not rows:
        return [], [], 0
    dropped = [r.id for r in rows if r.raw_dropped_until is not None]
    return [r.id for r in rows], dropped, int(rows[0].metric_id)
