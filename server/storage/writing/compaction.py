"""Compaction: hot values into rollups (and, on DuckDB, into sorted chunks merged as they pile
up).

On DuckDB ingest appends to `points_hot` and `bucket_hot` in arrival order, where the rows of
every live run interleave. Compaction takes what is there (one snapshot), writes it to `points`
sorted by (metric, series, step) as one chunk, writes the chunk's rollups — for every block of
8, 64, … 8⁶ steps: min, max, sum and count of finite values, the last value and its time, the
counts of NaN and ±Inf — and deletes the moved rows. Concurrent ingest keeps appending: rows
that arrive meanwhile are not in the snapshot and stay for the next round. A read finds a series
through the min/max statistics of each chunk's row groups, so the number of chunks is what a
read pays for: when more than `FANOUT` chunks of one level pile up they are merged into one
chunk of the next level (rollup rows of one block from several chunks merge into one).

On PostgreSQL values are written once, where they stay (`pg_points`: a partitioned table with
indexes on (series, step), hot or compacted by a watermark): a round seals the chunk writers
were using, upserts the rollups of its values in place (`rollup_upsert`: one row per block) and
raises the watermark. Nothing is merged or moved.

Bucket rows move from `bucket_hot` to `bucket_rows` on both, with 64-step block sums in
`bucket_blocks`. Every rollup column merges exactly (min of mins, sum of sums, the last value by
step), so a block split across chunks or rounds, or half still hot, reads the same as one
computed at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.domain.compaction import CompactionResult
from server.storage import downsampling, sql
from server.storage.db import Database
from server.storage.writing import pg_points, rollup_upsert

log = logging.getLogger("mismatch_monitor.storage")

LEVELS = (1, 2, 3, 4, 5, 6)
FANOUT = 8
BUCKET_BLOCK = 64  # steps per bucket block
HOT_ROWS = 262_144  # compact when the hot table holds this many values
BUCKET_SUMS = ("tokens", "sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3", "oob")
BUCKET_KEY = ("run_pk", "source", "actor", "basis", "idx")
SEGMENT_JOIN = (
    "LEFT JOIN actors a ON a.run_pk = b.run_pk AND a.source = b.source AND a.actor = b.actor "
    "AND b.step BETWEEN a.first_step AND a.last_step"
)
"""A row's GPU: its actor's GPU segment at its step (`b` the row, `a` the segment)."""


def width(level: int) -> int:
    """Steps per block at a rollup level (level 0: single steps)."""
    return int(8**level)


def compact(db: Database, *, merge: bool = True) -> CompactionResult:
    """Move everything in the hot tables into a new chunk; then merge chunks where due. On
    PostgreSQL values are not moved: their rollups are upserted and the watermark raised
    (`pg_points`)."""
    result = CompactionResult()
    if not db.is_duckdb:
        opened = pg_points.seal(db)
        with db.maintain() as conn:
            sealed = pg_points.sealed_since(conn, opened)
            result.points = rollup_upsert.roll_up(conn, sealed)
            if result.points:
                _catalog(conn, sealed.last, "points", result.points)
            result.buckets = _move_buckets(conn, sealed.last)
        return result
    with db.maintain() as conn:
        chunk = int(conn.execute(sa.text("SELECT nextval('chunk_id_seq')")).scalar_one())
        result.points = _move_points(conn, db.dialect, chunk)
        result.buckets = _move_buckets(conn, chunk)
    if merge and db.is_duckdb:
        for kind in ("points", "rollups", "bucket_rows", "bucket_blocks"):
            result.merged += merge_due(db, kind)
    return result


def compact_all(db: Database, progress: Callable[[int, int], None] | None = None) -> int:
    """Compact until the hot tables are empty (after a migration, before retention); returns
    the values moved. `progress(done, total)` is called after each round."""
    with db.read() as conn:
        total = int(conn.execute(sa.text("SELECT count(*) FROM points_hot")).scalar_one())
    done = 0
    while True:
        moved = compact(db).points
        done += moved
        if progress is not None:
            progress(min(done, total), total)
        if moved == 0:
            return done


def _snapshot(conn: Connection, table: str, columns: str, source: str) -> int:
    """Copy the rows of the hot table visible now into a temporary table and delete them from
    the hot table, in the caller's transaction (one snapshot: rows appended meanwhile stay)."""
    conn.execute(sa.text(f"DROP TABLE IF EXISTS moved_{table}"))
    conn.execute(sa.text(f"CREATE TEMPORARY TABLE moved_{table} AS SELECT {columns} FROM {source}"))
    conn.execute(sa.text(f"DELETE FROM {table}"))
    count = conn.execute(sa.text(f"SELECT count(*) FROM moved_{table}")).scalar_one()
    return int(count)


def _move_points(conn: Connection, dialect: str, chunk: int) -> int:
    moved = _snapshot(
        conn,
        "points_hot",
        "s.metric_id, h.series_id, h.step, h.value, h.time",
        "points_hot h JOIN series s ON s.id = h.series_id",
    )
    if not moved:
        return 0
    conn.execute(
        sa.text(
            "INSERT INTO points (metric_id, series_id, step, value, chunk) "
            "SELECT metric_id, series_id, step, value, :chunk FROM moved_points_hot "
            "ORDER BY metric_id, series_id, step"
        ),
        {"chunk": chunk},
    )
    selects = " UNION ALL ".join(_rollup_select(dialect, level) for level in LEVELS)
    conn.execute(
        sa.text(
            f"INSERT INTO rollups ({', '.join(ROLLUP_COLUMNS)}, chunk) "
            f"SELECT *, :chunk FROM ({selects}) AS r ORDER BY metric_id, series_id, level, block"
        ),
        {"chunk": chunk},
    )
    _catalog(conn, chunk, "points", moved)
    _catalog(conn, chunk, "rollups", moved)
    conn.execute(sa.text("DROP TABLE moved_points_hot"))
    return moved


ROLLUP_COLUMNS = ("metric_id", "series_id", "level", "block", *downsampling.FIELDS)


def _rollup_select(dialect: str, level: int) -> str:
    """The rollup rows of one level, from the moved values."""
    w = width(level)
    finite = "value > '-Infinity'::DOUBLE PRECISION AND value < 'Infinity'::DOUBLE PRECISION"
    return (
        f"SELECT metric_id, series_id, CAST({level} AS SMALLINT) AS level, "
        f"CAST(floor(step / {w}.0) AS BIGINT) AS block, min(step), max(step), "
        f"min(CASE WHEN {finite} THEN value END), max(CASE WHEN {finite} THEN value END), "
        f"coalesce(sum(CASE WHEN {finite} THEN value END), 0), "
        f"sum(CASE WHEN {finite} THEN 1 ELSE 0 END), count(*), max(step), "
        f"{sql.last_value_text(dialect, 'value', 'step')}, "
        f"{sql.last_value_text(dialect, 'time', 'step')}, "
        "sum(CASE WHEN value > 'Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END), "
        "sum(CASE WHEN value = 'Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END), "
        "sum(CASE WHEN value = '-Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END) "
        f"FROM moved_points_hot GROUP BY metric_id, series_id, floor(step / {w}.0)"
    )


def _move_buckets(conn: Connection, chunk: int) -> int:
    key = ", ".join(BUCKET_KEY)
    sums = ", ".join(BUCKET_SUMS)
    moved = _snapshot(conn, "bucket_hot", "*", "bucket_hot")
    if not moved:
        return 0
    conn.execute(
        sa.text(
            f"INSERT INTO bucket_rows ({key}, step, lo, hi, {sums}, chunk) "
            f"SELECT {key}, step, lo, hi, {sums}, :chunk FROM moved_bucket_hot "
            "ORDER BY run_pk, step, source, actor, basis, idx"
        ),
        {"chunk": chunk},
    )
    block = f"CAST(floor(b.step / {BUCKET_BLOCK}.0) AS BIGINT)"
    b_key = ", ".join(f"b.{k}" for k in BUCKET_KEY)
    conn.execute(
        sa.text(
            f"INSERT INTO bucket_blocks ({key}, block, gpu, lo, hi, {sums}, step_lo, step_hi, "
            f"steps, chunk) SELECT {b_key}, {block}, a.gpu, min(b.lo), max(b.hi), "
            + ", ".join(f"sum(b.{s})" for s in BUCKET_SUMS)
            + ", min(b.step), max(b.step), count(*), :chunk FROM moved_bucket_hot b "
            f"{SEGMENT_JOIN} GROUP BY {b_key}, {block}, a.gpu ORDER BY b.run_pk, {block}"
        ),
        {"chunk": chunk},
    )
    _catalog(conn, chunk, "bucket_rows", moved)
    _catalog(conn, chunk, "bucket_blocks", moved)
    conn.execute(sa.text("DROP TABLE moved_bucket_hot"))
    return moved


def _catalog(conn: Connection, chunk: int, kind: str, rows: int, level: int = 0) -> None:
    """Record a chunk of `kind`. On PostgreSQL a round that finds nothing new to roll up but has
    bucket rows to move names its chunk after the last round's, whose rows it then adds to."""
    conn.execute(
        sa.text(
            "INSERT INTO chunks (id, kind, level, rows, created_at) "
            "VALUES (:id, :kind, :level, :rows, :now) "
            "ON CONFLICT (id, kind) DO UPDATE SET rows = chunks.rows + excluded.rows"
        ),
        {"id": chunk, "kind": kind, "level": level, "rows": rows, "now": time.time()},
    )


# -- merging (DuckDB) -------------------------------------------------------------------------
MERGES: dict[str, tuple[str, str, str]] = {
    # kind: (columns kept, aggregation over merged rows, sort/group key)
    "points": ("metric_id, series_id, step, value", "", "metric_id, series_id, step"),
    "bucket_rows": (
        f"{', '.join(BUCKET_KEY)}, step, lo, hi, {', '.join(BUCKET_SUMS)}",
        "",
        "run_pk, step, source, actor, basis, idx",
    ),
    "rollups": (
        ", ".join(ROLLUP_COLUMNS),
        "min(step_lo), max(step_hi), min(vmin), max(vmax), sum(vsum), sum(finite), sum(total), "
        "max(last_step), arg_max(last_value, last_step), arg_max(last_time, last_step), "
        "sum(nan), sum(pos_inf), sum(neg_inf)",
        "metric_id, series_id, level, block",
    ),
    "bucket_blocks": (
        f"{', '.join(BUCKET_KEY)}, block, gpu, lo, hi, {', '.join(BUCKET_SUMS)}, step_lo, "
        "step_hi, steps",
        "min(lo), max(hi), "
        + ", ".join(f"sum({s})" for s in BUCKET_SUMS)
        + ", min(step_lo), max(step_hi), sum(steps)",
        f"{', '.join(BUCKET_KEY)}, block, gpu",
    ),
}


def merge_due(db: Database, kind: str) -> list[tuple[str, int, int]]:
    """Merge the chunks of `kind` at every level that holds more than FANOUT of them."""
    done = []
    level = 0
    while True:
        with db.read() as conn:
            rows = conn.execute(
                sa.text("SELECT id FROM chunks WHERE kind = :kind AND level = :level ORDER BY id"),
                {"kind": kind, "level": level},
            ).all()
            deeper = conn.execute(
                sa.text("SELECT count(*) FROM chunks WHERE kind = :kind AND level > :level"),
                {"kind": kind, "level": level},
            ).scalar_one()
        ids = [int(r.id) for r in rows]
        if len(ids) > FANOUT:
            merge(db, kind, ids, level + 1)
            done.append((kind, level, len(ids)))
        elif not deeper:
            return done
        level += 1


def merge(db: Database, kind: str, ids: list[int], level: int) -> int:
    """Rewrite the chunks `ids` of `kind` as one sorted chunk at `level`."""
    columns, aggregate, key = MERGES[kind]
    in_ids = ", ".join(str(i) for i in ids)
    with db.maintain() as conn:
        new = int(conn.execute(sa.text("SELECT nextval('chunk_id_seq')")).scalar_one())
        if aggregate:  # rows of one key from several chunks become one row
            select = (
                f"SELECT {key}, {aggregate}, {new} FROM {kind} WHERE chunk IN ({in_ids}) "
                f"GROUP BY {key} ORDER BY {key}"
            )
        else:
            select = f"SELECT {columns}, {new} FROM {kind} WHERE chunk IN ({in_ids}) ORDER BY {key}"
        conn.execute(sa.text(f"INSERT INTO {kind} ({columns}, chunk) {select}"))
        rows = int(
            conn.execute(
                sa.text(f"SELECT count(*) FROM {kind} WHERE chunk = :new"), {"new": new}
            ).scalar_one()
        )
        conn.execute(sa.text(f"DELETE FROM {kind} WHERE chunk IN ({in_ids})"))
        conn.execute(
            sa.text(f"DELETE FROM chunks WHERE kind = :kind AND id IN ({in_ids})"), {"kind": kind}
        )
        _catalog(conn, new, kind, rows, level)
    log.info(
        "merged %d %s chunks into chunk %d (level %d, %d rows)", len(ids), kind, new, level, rows
    )
    return new
