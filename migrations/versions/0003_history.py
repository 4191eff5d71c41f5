"""History that stays fast: hot/compacted points, rollups, series heads, actor segments.

The values stored so far move to the hot tables, as fresh ingest would leave them; compaction
(run by `mismatch migrate` and by the server, with a progress bar) then sorts them into chunks
and writes their rollups. Heads and actor segments are back-filled here, in SQL.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.schema import CreateSequence, DropSequence

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

F = sa.Float(53)
BIG = sa.BigInteger
HEAD_COLUMNS = (
    ("metric_id", sa.Integer, "0"),
    ("points", BIG, "0"),
    ("first_step", BIG, None),
    ("last_step", BIG, None),
    ("last_value", F, None),
    ("first_time", F, None),
    ("last_time", F, None),
    ("nan", BIG, "0"),
    ("pos_inf", BIG, "0"),
    ("neg_inf", BIG, "0"),
    ("raw_dropped_until", BIG, None),
)
BUCKET_SUMS = ("tokens", "sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3", "oob")


def _is_pg() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def _bucket_columns(*, with_step: bool = True) -> list[sa.Column[object]]:
    columns: list[sa.Column[object]] = [
        sa.Column("run_pk", BIG, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
    ]
    if with_step:
        columns.append(sa.Column("step", BIG, nullable=False))
    columns += [
        sa.Column("basis", sa.String(16), nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("lo", F, nullable=False),
        sa.Column("hi", F, nullable=False),
    ]
    return columns + [sa.Column(name, F, nullable=False) for name in BUCKET_SUMS]


def upgrade() -> None:
    _new_tables()
    for name, kind, default in HEAD_COLUMNS:
        op.add_column(
            "series", sa.Column(name, kind, nullable=default is None, server_default=default)
        )
    op.add_column("runs", sa.Column("raw_dropped_at", F, nullable=True))
    _move_values()
    _backfill_heads()
    _backfill_actors()
    if _is_pg():
        op.create_index("ix_points_series_step", "points", ["series_id", "step"])
        op.create_index("ix_rollups_series", "rollups", ["series_id", "level", "block"])
        op.create_index("ix_bucket_rows_run_step", "bucket_rows", ["run_pk", "step"])
        op.create_index("ix_bucket_blocks_run", "bucket_blocks", ["run_pk", "block"])


def _new_tables() -> None:
    op.execute(CreateSequence(sa.Sequence("metric_id_seq")))
    op.execute(CreateSequence(sa.Sequence("chunk_id_seq")))
    op.create_table(
        "metric_names",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
    )
    op.create_table(
        "points_hot",
        sa.Column("series_id", BIG, nullable=False),
        sa.Column("step", BIG, nullable=False),
        sa.Column("value", F, nullable=False),
        sa.Column("time", F, nullable=False),
    )
    op.create_table(
        "rollups",
        sa.Column("metric_id", sa.Integer, nullable=False),
        sa.Column("series_id", BIG, nullable=False),
        sa.Column("level", sa.SmallInteger, nullable=False),
        sa.Column("block", BIG, nullable=False),
        sa.Column("step_lo", BIG, nullable=False),
        sa.Column("step_hi", BIG, nullable=False),
        sa.Column("vmin", F, nullable=True),
        sa.Column("vmax", F, nullable=True),
        sa.Column("vsum", F, nullable=False),
        sa.Column("finite", BIG, nullable=False),
        sa.Column("total", BIG, nullable=False),
        sa.Column("last_step", BIG, nullable=False),
        sa.Column("last_value", F, nullable=False),
        sa.Column("last_time", F, nullable=False),
        sa.Column("nan", BIG, nullable=False),
        sa.Column("pos_inf", BIG, nullable=False),
        sa.Column("neg_inf", BIG, nullable=False),
        sa.Column("chunk", BIG, nullable=False),
    )
    op.create_table(
        "chunks",
        sa.Column("id", BIG, primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("level", sa.SmallInteger, nullable=False),
        sa.Column("rows", BIG, nullable=False),
        sa.Column("created_at", F, nullable=False),
    )
    op.create_table(
        "actors",
        sa.Column("run_pk", BIG, primary_key=True),
        sa.Column("source", sa.String(16), primary_key=True),
        sa.Column("actor", sa.String(128), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("gpu", sa.String(200), nullable=True),
        sa.Column("first_step", BIG, nullable=False),
        sa.Column("last_step", BIG, nullable=False),
        sa.Column("steps", BIG, nullable=False),
        sa.Column("first_time", F, nullable=False),
        sa.Column("last_time", F, nullable=False),
    )
    op.create_table("bucket_hot", *_bucket_columns())
    op.create_table(
        "bucket_blocks",
        *_bucket_columns(with_step=False),
        sa.Column("block", BIG, nullable=False),
        sa.Column("gpu", sa.String(200), nullable=True),
        sa.Column("step_lo", BIG, nullable=False),
        sa.Column("step_hi", BIG, nullable=False),
        sa.Column("steps", BIG, nullable=False),
        sa.Column("chunk", BIG, nullable=False),
    )


def _move_values() -> None:
    """Stored values and bucket rows go to the hot tables (with their step's wall time); the
    compacted tables are created empty, in their new shape."""
    op.execute(
        "INSERT INTO points_hot (series_id, step, value, time) "
        "SELECT p.series_id, p.step, p.value, coalesce(r.time, 0) FROM points p "
        "JOIN series s ON s.id = p.series_id "
        "LEFT JOIN step_records r ON r.run_pk = s.run_pk AND r.source = s.source "
        "AND r.actor = s.actor AND r.step = p.step"
    )
    if _is_pg():
        op.drop_index("ix_points_series_step", table_name="points")
    op.drop_table("points")
    op.create_table(
        "points",
        sa.Column("metric_id", sa.Integer, nullable=False),
        sa.Column("series_id", BIG, nullable=False),
        sa.Column("step", BIG, nullable=False),
        sa.Column("value", F, nullable=False),
        sa.Column("chunk", BIG, nullable=False),
    )
    columns = ", ".join(c.name for c in _bucket_columns())
    op.execute(f"INSERT INTO bucket_hot ({columns}) SELECT {columns} FROM bucket_rows")
    op.drop_index("ix_bucket_rows_run_step", table_name="bucket_rows")
    op.drop_table("bucket_rows")
    op.create_table("bucket_rows", *_bucket_columns(), sa.Column("chunk", BIG, nullable=False))


def _backfill_heads() -> None:
    """Metric ids, and each series' head from its values (now in `points_hot`)."""
    op.execute(
        "INSERT INTO metric_names (id, name) SELECT nextval('metric_id_seq'), metric "
        "FROM (SELECT DISTINCT metric FROM series ORDER BY metric) AS m"
    )
    op.execute(
        "UPDATE series SET metric_id = m.id FROM metric_names m WHERE m.name = series.metric"
    )
    op.execute(
        "UPDATE series SET points = h.n, first_step = h.first_step, last_step = h.last_step, "
        "first_time = h.first_time, last_time = h.last_time, last_value = h.last_value, "
        "nan = h.nan, pos_inf = h.pos_inf, neg_inf = h.neg_inf FROM ("
        "  SELECT p.series_id, count(*) AS n, min(p.step) AS first_step, "
        "  max(p.step) AS last_step, min(p.time) AS first_time, max(p.time) AS last_time, "
        "  (array_agg(p.value ORDER BY p.step DESC))[1] AS last_value, "
        "  sum(CASE WHEN p.value > 'Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END) AS nan, "
        "  sum(CASE WHEN p.value = 'Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END) AS pos_inf, "
        "  sum(CASE WHEN p.value = '-Infinity'::DOUBLE PRECISION THEN 1 ELSE 0 END) AS neg_inf "
        "  FROM points_hot p GROUP BY p.series_id) AS h WHERE h.series_id = series.id"
    )


def _backfill_actors() -> None:
    """One row per contiguous GPU segment of each actor, from its step records: a new segment
    starts where a known GPU name differs from the last known one (a step with no GPU name
    continues the segment it is in) — the rule ingest follows (`storage/heads.py`)."""
    actor = "PARTITION BY run_pk, source, actor"
    running = f"({actor} ORDER BY step ROWS UNBOUNDED PRECEDING)"
    op.execute(
        "INSERT INTO actors (run_pk, source, actor, seq, gpu, first_step, last_step, steps, "
        "first_time, last_time) "
        "SELECT run_pk, source, actor, seg, max(known), min(step), max(step), count(*), "
        "min(time), max(time) FROM ("
        "  SELECT *, sum(CASE WHEN known <> prev THEN 1 ELSE 0 END) OVER "
        f"  {running} AS seg FROM ("
        f"    SELECT *, lag(known) OVER ({actor} ORDER BY step) AS prev FROM ("
        f"      SELECT *, max(gpu) OVER ({actor}, mark) AS known FROM ("
        f"        SELECT *, count(gpu) OVER {running} AS mark FROM step_records"
        "      ) AS marked"
        "    ) AS known_gpus"
        "  ) AS with_prev"
        ") AS segmented GROUP BY run_pk, source, actor, seg"
    )


def downgrade() -> None:
    op.create_table(
        "points_old",
        sa.Column("series_id", BIG, nullable=False),
        sa.Column("step", BIG, nullable=False),
        sa.Column("value", F, nullable=False),
    )
    op.execute(
        "INSERT INTO points_old SELECT series_id, step, value FROM points "
        "UNION ALL SELECT series_id, step, value FROM points_hot"
    )
    if _is_pg():
        for index, table in (
            ("ix_points_series_step", "points"),
            ("ix_rollups_series", "rollups"),
            ("ix_bucket_rows_run_step", "bucket_rows"),
            ("ix_bucket_blocks_run", "bucket_blocks"),
        ):
            op.drop_index(index, table_name=table)
    op.drop_table("points")
    op.rename_table("points_old", "points")
    if _is_pg():
        op.create_index("ix_points_series_step", "points", ["series_id", "step"])
    columns = ", ".join(c.name for c in _bucket_columns())
    op.create_table("bucket_rows_old", *_bucket_columns())
    op.execute(
        f"INSERT INTO bucket_rows_old SELECT {columns} FROM bucket_rows "
        f"UNION ALL SELECT {columns} FROM bucket_hot"
    )
    op.drop_table("bucket_rows")
    op.rename_table("bucket_rows_old", "bucket_rows")
    op.create_index("ix_bucket_rows_run_step", "bucket_rows", ["run_pk", "step"])
    for table in (
        "bucket_blocks",
        "bucket_hot",
        "actors",
        "chunks",
        "rollups",
        "points_hot",
        "metric_names",
    ):
        op.drop_table(table)
    op.drop_index("ix_runs_project", table_name="runs")  # DuckDB alters no indexed table
    op.drop_column("runs", "raw_dropped_at")
    op.create_index("ix_runs_project", "runs", ["project"])
    for name, _, _ in reversed(HEAD_COLUMNS):
        op.drop_column("series", name)
    op.execute(DropSequence(sa.Sequence("chunk_id_seq")))
    op.execute(DropSequence(sa.Sequence("metric_id_seq")))
