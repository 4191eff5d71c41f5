"""PostgreSQL stores values once: a table partitioned by compaction round, read through views;
rollups are one row per block, merged in place.

Before, ingest appended values to `points_hot` and every compaction round deleted them there and
inserted them again, sorted, into `points`, appending a partial rollup row per block and round.
From here on (see `server/storage/writing/pg_points.py`):
- `point_values`, partitioned by RANGE of `chunk`, holds every value. The stored `points` table
  becomes its first partition as it is (attached, not copied); the hot values move into the
  second partition, which new values go to. Indexes: (series_id, step) with metric_id, value
  and chunk included, and (chunk, series_id, step).
- `points` and `points_hot` become views over it, split at `compaction_state.hot_from`, with
  the columns the tables had: every reader reads what it read before.
- `rollups`: the partial rows of each block merged into one (exactly: min of mins, sums of sums,
  the last value by step) under a unique index on (series_id, level, block), which compaction
  upserts into.
DuckDB is left as it is: its layout is the log-structured one these replace.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

SPAN = 1 << 24  # chunk ids per partition: `server/storage/pg_points.SPAN`
ROLLUP_FIELDS = (
    "step_lo, step_hi, vmin, vmax, vsum, finite, total, last_step, last_value, last_time, "
    "nan, pos_inf, neg_inf"
)
VALUE_COLUMNS = (
    "series_id BIGINT NOT NULL, step BIGINT NOT NULL, value DOUBLE PRECISION NOT NULL, "
    "time DOUBLE PRECISION, chunk BIGINT NOT NULL, metric_id INTEGER NOT NULL"
)
HOT_FROM = (
    "CREATE FUNCTION hot_from() RETURNS BIGINT LANGUAGE sql STABLE "
    "AS 'SELECT hot_from FROM compaction_state'"
)
VIEWS = (
    # The compacted view reads the watermark once per statement (a subquery): compared with a
    # function, which runs per row where it is no index condition.
    "CREATE VIEW points AS SELECT metric_id, series_id, step, value, chunk FROM point_values "
    "WHERE chunk < (SELECT hot_from FROM compaction_state)",
    # The hot view through the stable function, which the planner evaluates when it estimates:
    # it knows how few values are hot, reads them by the (chunk, series, step) index (the
    # function once, as an index condition) and prunes the partitions below the watermark.
    "CREATE VIEW points_hot AS SELECT series_id, step, value, time FROM point_values "
    "WHERE chunk >= hot_from()",
)


def _is_pg() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def upgrade() -> None:
    if not _is_pg():
        return
    _values()
    _rollups()


def _values() -> None:
    top = op.get_bind().exec_driver_sql("SELECT coalesce(max(chunk), 0) FROM points").scalar_one()
    if top >= SPAN:
        raise RuntimeError(f"chunk ids reach {top}, beyond the first partition's {SPAN}")
    op.execute(f"CREATE TABLE point_values ({VALUE_COLUMNS}) PARTITION BY RANGE (chunk)")
    op.execute(
        "CREATE INDEX ix_point_values_series_step ON point_values (series_id, step) "
        "INCLUDE (metric_id, value, chunk)"
    )
    op.execute("CREATE INDEX ix_point_values_chunk ON point_values (chunk, series_id, step)")
    # The compacted values become the first partition where they lie.
    op.execute("DROP INDEX ix_points_series_step")
    op.execute("ALTER TABLE points ADD COLUMN time DOUBLE PRECISION")
    op.execute("ALTER TABLE points RENAME TO point_values_p0")
    op.execute(f"ALTER TABLE point_values_p0 ADD CHECK (chunk >= 0 AND chunk < {SPAN})")
    op.execute(
        f"ALTER TABLE point_values ATTACH PARTITION point_values_p0 FOR VALUES FROM (0) TO ({SPAN})"
    )
    # The hot values go to the second partition, in the chunk writers use next.
    op.execute(
        f"CREATE TABLE point_values_p1 (LIKE point_values INCLUDING DEFAULTS INCLUDING "
        f"CONSTRAINTS, CHECK (chunk >= {SPAN} AND chunk < {2 * SPAN}))"
    )
    op.execute(
        f"ALTER TABLE point_values ATTACH PARTITION point_values_p1 "
        f"FOR VALUES FROM ({SPAN}) TO ({2 * SPAN})"
    )
    op.execute(
        "INSERT INTO point_values (metric_id, series_id, step, value, time, chunk) "
        f"SELECT s.metric_id, h.series_id, h.step, h.value, h.time, {SPAN} FROM points_hot h "
        "JOIN series s ON s.id = h.series_id"
    )
    op.execute("DROP TABLE points_hot")
    op.execute("CREATE TABLE compaction_state (hot_from BIGINT NOT NULL)")
    op.execute(f"INSERT INTO compaction_state VALUES ({SPAN})")
    op.execute(f"SELECT setval('chunk_id_seq', {SPAN})")  # the open chunk: the sequence's last
    op.execute(HOT_FROM)
    for view in VIEWS:
        op.execute(view)


def _rollups() -> None:
    """One row per block: the partial rows merged, in a table built anew (a merge in place
    would leave as many dead rows as there were partial ones)."""
    op.execute(
        "CREATE TABLE rollups_merged (LIKE rollups INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
        "WITH (fillfactor = 90)"
    )
    op.execute(
        f"INSERT INTO rollups_merged (metric_id, series_id, level, block, {ROLLUP_FIELDS}, chunk) "
        "SELECT min(metric_id), series_id, level, block, min(step_lo), max(step_hi), min(vmin), "
        "max(vmax), sum(vsum), sum(finite), sum(total), max(last_step), "
        "(array_agg(last_value ORDER BY last_step DESC))[1], "
        "(array_agg(last_time ORDER BY last_step DESC))[1], sum(nan), sum(pos_inf), "
        "sum(neg_inf), max(chunk) FROM rollups GROUP BY series_id, level, block "
        "ORDER BY series_id, level, block"
    )
    op.execute("DROP TABLE rollups")
    op.execute("ALTER TABLE rollups_merged RENAME TO rollups")
    op.execute("CREATE UNIQUE INDEX uq_rollups_block ON rollups (series_id, level, block)")


def downgrade() -> None:
    if not _is_pg():
        return
    op.execute("DROP VIEW points")
    op.execute("DROP VIEW points_hot")
    op.execute(
        "CREATE TABLE points_hot (series_id BIGINT NOT NULL, step BIGINT NOT NULL, "
        "value DOUBLE PRECISION NOT NULL, time DOUBLE PRECISION NOT NULL)"
    )
    op.execute(
        "INSERT INTO points_hot SELECT series_id, step, value, time FROM point_values "
        "WHERE chunk >= hot_from()"
    )
    op.execute(
        "CREATE TABLE points (metric_id INTEGER NOT NULL, series_id BIGINT NOT NULL, "
        "step BIGINT NOT NULL, value DOUBLE PRECISION NOT NULL, chunk BIGINT NOT NULL)"
    )
    op.execute(
        "INSERT INTO points SELECT metric_id, series_id, step, value, chunk FROM point_values "
        "WHERE chunk < (SELECT hot_from FROM compaction_state) "
        "ORDER BY metric_id, series_id, step"
    )
    op.execute("DROP TABLE point_values")
    op.execute("DROP FUNCTION hot_from()")
    op.execute("DROP TABLE compaction_state")
    op.execute("CREATE INDEX ix_points_series_step ON points (series_id, step)")
    op.execute("DROP INDEX uq_rollups_block")
    op.execute("ALTER TABLE rollups RESET (fillfactor)")
    op.execute("CREATE INDEX ix_rollups_series ON rollups (series_id, level, block)")
