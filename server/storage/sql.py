"""SQL pieces that differ by dialect or need explaining, written once for every query.

DuckDB and PostgreSQL both order NaN above +Inf (NaN is "the largest float" in both), which the
predicates below rely on: `value > +Inf` is true only for NaN, and `-Inf < value < +Inf` only
for finite values. Comparing instead of calling `isnan()` keeps one spelling for both databases
(PostgreSQL has no `isnan` for float8).
"""

from __future__ import annotations

import math
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

INF = math.inf


def is_finite(value: ColumnElement[Any]) -> ColumnElement[bool]:
    return sa.and_(value > -INF, value < INF)


def is_nan(value: ColumnElement[Any]) -> ColumnElement[bool]:
    """NaN sorts above +Inf on both databases (see the module docstring)."""
    return value > INF


def count_where(condition: ColumnElement[bool]) -> ColumnElement[Any]:
    return sa.func.sum(sa.case((condition, 1), else_=0))


def finite_or_null(value: ColumnElement[Any]) -> ColumnElement[Any]:
    """The value when finite, else NULL: min/max/avg over it skip NaN and ±Inf."""
    return sa.case((is_finite(value), value))


def last_value(
    dialect: str, value: ColumnElement[Any], step: ColumnElement[Any]
) -> ColumnElement[Any]:
    """The value at the largest step of a group.

    DuckDB has `arg_max`. PostgreSQL has no such aggregate, so the group's values are collected
    in descending step order and the first is taken; SQLAlchemy cannot express an ORDER BY inside
    an aggregate's argument list portably, so that clause is spliced in as literal SQL built from
    the two column expressions (never from user input)."""
    if dialect == "duckdb":
        return sa.func.arg_max(value, step)
    return sa.type_coerce(
        sa.func.array_agg(sa.literal_column(f"{value} ORDER BY {step} DESC")),
        sa.ARRAY(sa.Float(53)),
    )[1]


def quantiles(dialect: str, value: ColumnElement[Any], qs: tuple[float, ...]) -> ColumnElement[Any]:
    """An array of continuous quantiles of `value` (spliced as literal SQL on PostgreSQL, whose
    ordered-set aggregate syntax SQLAlchemy does not build; `qs` are our own constants)."""
    if dialect == "duckdb":
        return sa.func.quantile_cont(value, sa.literal(list(qs)))
    return sa.literal_column(
        "percentile_cont(ARRAY[" + ",".join(map(str, qs)) + f"]) WITHIN GROUP (ORDER BY {value})"
    )


def step_block(step: ColumnElement[Any], lo: int, width: int) -> ColumnElement[Any]:
    """The index of the equal-width step block a step falls in, counting from `lo`: the grouping
    key of every downsampled read (series, times, bucket heatmaps)."""
    return sa.func.floor((step - lo) / sa.cast(width, sa.Float(53)))


def block_width(lo: int, hi: int, max_blocks: int) -> int:
    """Steps per block so that [lo, hi] fits in at most `max_blocks` blocks."""
    return max(1, math.ceil((hi - lo + 1) / max_blocks))


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
