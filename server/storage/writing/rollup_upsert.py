"""Rollups merged in place on PostgreSQL: one row per (series, level, block), upserted.

Each compaction round computes the partial rollups of the values it seals — the 8-step blocks
from the values, the wider levels from those blocks — and merges them into the stored rows with
`INSERT … ON CONFLICT DO UPDATE`: min of mins, sums of sums, the last value by step. A block that
a slow live run fills over many rounds stays one row, updated where it lies (the table leaves
room in each page, so such an update rarely moves the row or touches the index). Every field
merges exactly, so a block's row equals the one computed from all its values at once.

DuckDB keeps appending one partial row per block and round and merges rows when it merges the
chunks (`compaction.merge`): it has no unique index to conflict on, on purpose (see `tables`).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.storage.writing import pg_points

LEVELS = (1, 2, 3, 4, 5, 6)
_FINITE = "value > '-Infinity'::DOUBLE PRECISION AND value < 'Infinity'::DOUBLE PRECISION"
_COLUMNS = (
    "metric_id, series_id, level, block, step_lo, step_hi, vmin, vmax, vsum, finite, total, "
    "last_step, last_value, last_time, nan, pos_inf, neg_inf"
)

_BLOCKS_OF_VALUES = (
    "SELECT metric_id, series_id, CAST(floor(step / 8.0) AS BIGINT) AS block, "
    f"min(step) AS step_lo, max(step) AS step_hi, min(CASE WHEN {_FINITE} THEN value END) AS vmin, "
    f"max(CASE WHEN {_FINITE} THEN value END) AS vmax, "
    f"coalesce(sum(CASE WHEN {_FINITE} THEN value END), 0) AS vsum, "
    f"sum(CASE WHEN {_FINITE} THEN 1 ELSE 0 END) AS finite, count(*) AS total, "
    "max(step) AS last_step, (array_agg(value ORDER BY step DESC))[1] AS last_value, "
    "(array_agg(time ORDER BY step DESC))[1] AS last_time, "
    "sum(CASE WHEN value > 'Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END) AS nan, "
    "sum(CASE WHEN value = 'Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END) AS pos_inf, "
    "sum(CASE WHEN value = '-Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END) AS neg_inf "
    "FROM {source} GROUP BY metric_id, series_id, floor(step / 8.0)"
)


def _level(level: int) -> str:
    """The partial rows of one level, merged from the 8-step blocks (`b`)."""
    if level == 1:
        return (
            "SELECT metric_id, series_id, CAST(1 AS SMALLINT), block, step_lo, step_hi, vmin, "
            "vmax, vsum, finite, total, last_step, last_value, last_time, nan, pos_inf, neg_inf "
            "FROM b"
        )
    per = 8 ** (level - 1)  # 8-step blocks per block of this level
    return (
        f"SELECT metric_id, series_id, CAST({level} AS SMALLINT), "
        f"CAST(floor(block / {per}.0) AS BIGINT), min(step_lo), max(step_hi), min(vmin), "
        "max(vmax), sum(vsum), sum(finite), sum(total), max(last_step), "
        "(array_agg(last_value ORDER BY last_step DESC))[1], "
        "(array_agg(last_time ORDER BY last_step DESC))[1], sum(nan), sum(pos_inf), sum(neg_inf) "
        f"FROM b GROUP BY metric_id, series_id, floor(block / {per}.0)"
    )


MERGE = (
    "step_lo = least(r.step_lo, excluded.step_lo), "
    "step_hi = greatest(r.step_hi, excluded.step_hi), "
    "vmin = least(r.vmin, excluded.vmin), vmax = greatest(r.vmax, excluded.vmax), "
    "vsum = r.vsum + excluded.vsum, finite = r.finite + excluded.finite, "
    "total = r.total + excluded.total, last_step = greatest(r.last_step, excluded.last_step), "
    "last_value = CASE WHEN excluded.last_step > r.last_step THEN excluded.last_value "
    "ELSE r.last_value END, "
    "last_time = CASE WHEN excluded.last_step > r.last_step THEN excluded.last_time "
    "ELSE r.last_time END, "
    "nan = r.nan + excluded.nan, pos_inf = r.pos_inf + excluded.pos_inf, "
    "neg_inf = r.neg_inf + excluded.neg_inf, chunk = excluded.chunk"
)
"""How a stored row takes in a partial one: exact for every field (least/greatest skip the NULL
min/max of a block without finite values; a value's step is unique within its series)."""


def roll_up(conn: Connection, sealed: pg_points.Sealed) -> int:
    """Upsert the rollups of the sealed chunks' values and raise the watermark; the number of
    values rolled up. In the caller's (maintenance) transaction."""
    moved = pg_points.count_sealed(conn, sealed)
    if moved:
        source, params = pg_points.sealed_values(sealed)
        levels = " UNION ALL ".join(_level(level) for level in LEVELS)
        conn.execute(
            sa.text(
                f"WITH b AS MATERIALIZED ({_BLOCKS_OF_VALUES.format(source=source)}) "
                f"INSERT INTO rollups AS r ({_COLUMNS}, chunk) "
                f"SELECT *, :chunk FROM ({levels}) AS p ORDER BY 2, 3, 4 "
                f"ON CONFLICT (series_id, level, block) DO UPDATE SET {MERGE}"
            ),
            {**params, "chunk": sealed.last},
        )
    pg_points.mark_rolled_up(conn, sealed)
    return moved
