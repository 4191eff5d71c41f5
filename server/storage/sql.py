"""SQL pieces that differ by dialect or need explaining, written once for every query.

DuckDB and PostgreSQL both order NaN above +Inf (NaN is "the largest float" in both), which the
predicates below rely on: `value > +Inf` is true only for NaN, and `-Inf < value < +Inf` only
for finite values. Comparing instead of calling `isnan()` keeps one spelling for both databases
(PostgreSQL has no `isnan` for float8).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
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
    dialect: str,
    value: ColumnElement[Any],
    step: ColumnElement[Any],
    type_: Any = None,
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
        sa.ARRAY(type_ if type_ is not None else sa.Float(53)),
    )[1]


def json_has_key(dialect: str, document: ColumnElement[Any], key: str) -> ColumnElement[bool]:
    """The JSON object stored as text in `document` has `key` (any characters)."""
    if dialect == "duckdb":
        return sa.func.json_exists(document, json_pointer(key))
    return sa.func.jsonb_exists(sa.cast(document, JSONB), key)


def json_text_at(dialect: str, document: ColumnElement[Any], key: str) -> ColumnElement[Any]:
    """The string at `key` of the JSON object stored as text in `document`."""
    if dialect == "duckdb":
        return sa.func.json_extract_string(document, json_pointer(key))
    return sa.cast(document, JSONB).op("->>")(key)


_JSON_KINDS = {
    "VARCHAR": "string",
    "BIGINT": "number",
    "UBIGINT": "number",
    "HUGEINT": "number",
    "DOUBLE": "number",
    "BOOLEAN": "boolean",
    "NULL": "null",
    "OBJECT": "object",
    "ARRAY": "array",
}

_NON_FINITE = "NaN|Infinity"
_PIECES = r'("(?:[^"\\]|\\.)*")|(NaN|-?Infinity)|([^"NI-]+|[NI-])'
"""A JSON text cut into pieces that cover it: a string, a non-finite token, anything else."""


def json_scalar_at(
    dialect: str, document: ColumnElement[Any], key: str
) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """The JSON type ('string', 'number', 'boolean', 'null', 'object', 'array'; NULL where the
    key is absent) and the text of the value at `key` of the JSON object stored as text in
    `document`.

    A config may hold NaN and ±Infinity (Python writes them as bare tokens), which DuckDB reads
    as numbers and PostgreSQL's JSON types refuse, failing the whole statement. On PostgreSQL a
    document that holds such a token is cut into pieces (`_PIECES`: strings whole, so a token's
    spelling inside a string is left alone) and each token made an object,
    `{"nonfinite": "NaN"}`, which no scalar equals, as no finite number equals them on DuckDB.
    The pieces are spliced in as literal SQL around the column expression (never user input)."""
    if dialect == "duckdb":
        pointer = json_pointer(key)
        kind = sa.func.json_type(document, pointer)
        named = sa.case(*((kind == k, v) for k, v in _JSON_KINDS.items()))
        return named, sa.func.json_extract_string(document, pointer)
    rebuilt: ColumnElement[Any] = sa.literal_column(
        "(SELECT string_agg(CASE WHEN p.m[2] IS NULL THEN coalesce(p.m[1], p.m[3]) "
        """ELSE '{"nonfinite": "' || p.m[2] || '"}' END, '' ORDER BY p.n) """
        f"FROM regexp_matches({document}, '{_PIECES}', 'g') WITH ORDINALITY AS p(m, n))"
    )
    readable = sa.case((document.regexp_match(_NON_FINITE), rebuilt), else_=document)
    parsed = sa.cast(readable, JSONB)
    return sa.func.jsonb_typeof(parsed.op("->")(key)), parsed.op("->>")(key)


def json_array_has(dialect: str, document: ColumnElement[Any], item: str) -> ColumnElement[bool]:
    """The JSON array of strings stored as text in `document` holds `item`."""
    if dialect == "duckdb":
        return sa.func.list_contains(sa.func.from_json(document, '["VARCHAR"]'), item)
    return sa.func.jsonb_exists(sa.cast(document, JSONB), item)


def json_pointer(key: str) -> str:
    """A JSON Pointer to a top-level key (RFC 6901: `~` and `/` escaped), so a key of any
    characters addresses exactly that key."""
    return "/" + key.replace("~", "~0").replace("/", "~1")


def like_pattern(text: str) -> str:
    """A LIKE pattern matching `text` anywhere, its own `%`, `_` and `\\` taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def last_value_text(dialect: str, value: str, step: str) -> str:
    """`last_value` as SQL text, for statements written as text (compaction)."""
    if dialect == "duckdb":
        return f"arg_max({value}, {step})"
    return f"(array_agg({value} ORDER BY {step} DESC))[1]"


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


def quantiles_text(dialect: str, value: str, qs: tuple[float, ...]) -> str:
    """`quantiles` as SQL text (NULLs are left out)."""
    if dialect == "duckdb":
        return f"quantile_cont({value}, [{', '.join(map(str, qs))}])"
    return f"percentile_cont(ARRAY[{', '.join(map(str, qs))}]) WITHIN GROUP (ORDER BY {value})"


def text(statement: str, *lists: str) -> sa.TextClause:
    """A textual statement whose parameters named in `lists` (those it uses) take a list of
    values, for `IN :name`."""
    clause = sa.text(statement)
    present = clause._bindparams
    return clause.bindparams(*(sa.bindparam(n, expanding=True) for n in lists if n in present))


def fetch_text(
    conn: Connection, query: sa.TextClause, params: dict[str, Any]
) -> list[tuple[Any, ...]]:
    """`fetch_all` for a statement written as text, with the parameters it names."""
    named = query._bindparams  # the text's own parameter names
    return fetch_all(conn, query.bindparams(**{k: v for k, v in params.items() if k in named}))


def fetch_columns(conn: Connection, query: sa.TextClause, params: dict[str, Any]) -> dict[str, Any]:
    """A query's result as columns (name → sequence): NumPy arrays straight from DuckDB, lists
    from PostgreSQL. What the NumPy cores of reads take."""
    named = query._bindparams
    bound = query.bindparams(**{k: v for k, v in params.items() if k in named})
    compiled = bound.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    if conn.dialect.name != "duckdb":
        # Plain tuples from the driver's cursor, in the caller's transaction: a read of tens of
        # thousands of rollup rows spent most of its time building SQLAlchemy rows.
        driver: Any = conn.connection.driver_connection
        cursor = driver.cursor()
        try:
            cursor.execute(str(compiled), compiled.construct_params())
            names = [c.name for c in cursor.description or []]
            columns = list(zip(*cursor.fetchall(), strict=True)) or [() for _ in names]
        finally:
            cursor.close()
        return {n: list(c) for n, c in zip(names, columns, strict=True)}
    values = compiled.construct_params()
    raw: Any = conn.connection.driver_connection
    cursor = raw.execute(str(compiled), [values[n] for n in compiled.positiontup or []])
    return {name: _unmasked(column) for name, column in cursor.fetchnumpy().items()}


def fetch_numbers(conn: Connection, query: sa.TextClause, params: dict[str, Any]) -> dict[str, Any]:
    """`fetch_columns` for a query of NOT NULL numeric columns, taken from DuckDB through its
    Arrow result, a quarter cheaper than its NumPy one for an export's reads (hundreds of
    thousands of rows each) and as exact. PostgreSQL's come as `fetch_columns` gives them."""
    if conn.dialect.name != "duckdb":
        return fetch_columns(conn, query, params)
    named = query._bindparams
    bound = query.bindparams(**{k: v for k, v in params.items() if k in named})
    compiled = bound.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    values = compiled.construct_params()
    raw: Any = conn.connection.driver_connection
    ordered = [values[n] for n in compiled.positiontup or []]
    relation = raw.sql(str(compiled), params=ordered)
    table = getattr(relation, "to_arrow_table", relation.fetch_arrow_table)()  # its 1.x name
    return {name: table.column(name).to_numpy() for name in table.column_names}


def _unmasked(column: Any) -> Any:
    """DuckDB hands NULLs back as a masked array, whose plain values hide a 0 under each mask:
    NULLs become NaN in a float column and None in any other, as the PostgreSQL path gives."""
    if not isinstance(column, np.ma.MaskedArray):
        return column
    if column.dtype.kind == "f":
        return column.filled(np.nan)
    hidden = np.broadcast_to(np.asarray(column.mask, dtype=bool), column.shape)  # or one bool
    out = column.data.astype(object)
    out[hidden] = None
    return out


def fetch_all(conn: Connection, query: sa.Select[Any] | sa.TextClause) -> list[tuple[Any, ...]]:
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
