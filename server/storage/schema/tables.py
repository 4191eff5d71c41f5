"""The schema, as SQLAlchemy Core tables. `migrations/` builds exactly this from empty.

Design notes:
- Times are float Unix seconds: portable between DuckDB and PostgreSQL, no time-zone driver
  quirks, and what the collectors send.
- JSON documents (config, labels, tags) are stored as text and parsed by the storage layer, so the
  same code runs on both databases.
- Metric values are keyed by a small integer `series_id` (one per run × source × actor × metric)
  and live in two tables, like a log-structured store: ingest appends columnar batches to
  `points_hot` in arrival order, and compaction (`storage/compaction.py`) moves them into
  `points` in chunks sorted by (metric, series, step), merging chunks as they accumulate, so that
  a series — or one metric across runs — sits in a few contiguous blocks whose min/max statistics
  let a read skip everything else. Compaction also writes `rollups`: per step block of widths
  8, 64, … 8⁶, the min, max, sum and count of finite values, the last value and the non-finite
  counts, so a zoomed-out view reads about as many rows as it draws. Neither table has a primary
  key: DuckDB keeps primary keys as in-memory indexes that slow appends; uniqueness is enforced
  by the ingest path instead (see `storage/ingest.py`).
- On PostgreSQL (migration 0010) `points` and `points_hot` are views with these columns over
  one table written once, `point_values`, partitioned by compaction round and indexed by
  (series, step); a watermark says which values the rollups hold, and `rollups` has one row per
  (series, level, block), upserted in place (see `storage/pg_points.py`).
- Per-series heads (count, first/last step, last value, non-finite counts, first/last time) are
  columns of `series`, updated by every batch, so run summaries never read values.
- `actors` holds one row per contiguous GPU segment of each (run, source, actor): the GPU types
  of a run, its actors, and a resume on other hardware, without reading step records.
- Probability buckets follow the same pattern: `bucket_hot` → `bucket_rows` (sorted by run and
  step) plus `bucket_blocks` (sums per 64-step block), which outlive retention.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

run_pk_seq = sa.Sequence("runs_pk_seq", metadata=metadata)
series_id_seq = sa.Sequence("series_id_seq", metadata=metadata)

projects = sa.Table(
    "projects",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("created_at", sa.Float(53), nullable=False),
)

project_references = sa.Table(
    "project_references",
    metadata,
    sa.Column("project", sa.String(128), primary_key=True),
    sa.Column("run_id", sa.String(128), nullable=False),  # a run id, not the runs table's pk
    sa.Column("set_at", sa.Float(53), nullable=False),
)

tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("project", sa.String(128), nullable=False),
    sa.Column("scope", sa.String(16), nullable=False),
    sa.Column("name", sa.String(200), nullable=False, server_default=""),
    sa.Column("salt", sa.String(64), nullable=False),
    sa.Column("hash", sa.String(128), nullable=False),
    sa.Column("created_at", sa.Float(53), nullable=False),
    sa.Column("revoked_at", sa.Float(53), nullable=True),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column(
        "pk", sa.BigInteger, run_pk_seq, server_default=run_pk_seq.next_value(), primary_key=True
    ),
    sa.Column("id", sa.String(128), nullable=False),
    sa.Column("project", sa.String(128), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("tags", sa.Text, nullable=False, server_default="[]"),
    sa.Column("labels", sa.Text, nullable=False, server_default="{}"),
    sa.Column("config", sa.Text, nullable=False, server_default="{}"),
    sa.Column("status", sa.String(16), nullable=False, server_default="running"),
    sa.Column("created_at", sa.Float(53), nullable=False),
    sa.Column("last_seen", sa.Float(53), nullable=True),
    sa.Column("last_step", sa.BigInteger, nullable=True),
    sa.Column("raw_dropped_at", sa.Float(53), nullable=True),  # retention dropped raw values
    sa.Column("kind", sa.String(16), nullable=False, server_default="training"),  # or "parity"
    sa.UniqueConstraint("project", "id", name="uq_runs_project_id"),  # run ids per project
)
sa.Index("ix_runs_project", runs.c.project)
sa.Index("ix_runs_id", runs.c.id)

step_records = sa.Table(
    "step_records",
    metadata,
    sa.Column("run_pk", sa.BigInteger, primary_key=True),
    sa.Column("source", sa.String(16), primary_key=True),
    sa.Column("actor", sa.String(128), primary_key=True),
    sa.Column("step", sa.BigInteger, primary_key=True),
    sa.Column("time", sa.Float(53), nullable=False),
    sa.Column("gpu", sa.String(200), nullable=True),
    sa.Column("weight_version", sa.BigInteger, nullable=True),
)

series = sa.Table(
    "series",
    metadata,
    sa.Column(
        "id",
        sa.BigInteger,
        series_id_seq,
        server_default=series_id_seq.next_value(),
        primary_key=True,
    ),
    sa.Column("run_pk", sa.BigInteger, nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("actor", sa.String(128), nullable=False),
    sa.Column("metric", sa.String(200), nullable=False),
    sa.Column("metric_id", sa.Integer, nullable=False, server_default="0"),
    # The head, kept by ingest: what a run summary shows without reading values.
    sa.Column("points", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("first_step", sa.BigInteger, nullable=True),
    sa.Column("last_step", sa.BigInteger, nullable=True),
    sa.Column("last_value", sa.Float(53), nullable=True),
    sa.Column("first_time", sa.Float(53), nullable=True),
    sa.Column("last_time", sa.Float(53), nullable=True),
    sa.Column("nan", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("pos_inf", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("neg_inf", sa.BigInteger, nullable=False, server_default="0"),
    # Raw values up to this step were dropped by retention; rollups still hold them.
    sa.Column("raw_dropped_until", sa.BigInteger, nullable=True),
    sa.UniqueConstraint("run_pk", "source", "actor", "metric", name="uq_series_key"),
)

metric_names = sa.Table(
    "metric_names",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(200), nullable=False, unique=True),
)

points_hot = sa.Table(
    "points_hot",
    metadata,
    sa.Column("series_id", sa.BigInteger, nullable=False),
    sa.Column("step", sa.BigInteger, nullable=False),
    sa.Column("value", sa.Float(53), nullable=False),
    sa.Column("time", sa.Float(53), nullable=False),
)

points = sa.Table(
    "points",
    metadata,
    sa.Column("metric_id", sa.Integer, nullable=False),
    sa.Column("series_id", sa.BigInteger, nullable=False),
    sa.Column("step", sa.BigInteger, nullable=False),
    sa.Column("value", sa.Float(53), nullable=False),
    sa.Column("chunk", sa.BigInteger, nullable=False),
)

rollups = sa.Table(
    "rollups",
    metadata,
    sa.Column("metric_id", sa.Integer, nullable=False),
    sa.Column("series_id", sa.BigInteger, nullable=False),
    sa.Column("level", sa.SmallInteger, nullable=False),
    sa.Column("block", sa.BigInteger, nullable=False),
    sa.Column("step_lo", sa.BigInteger, nullable=False),
    sa.Column("step_hi", sa.BigInteger, nullable=False),
    sa.Column("vmin", sa.Float(53), nullable=True),
    sa.Column("vmax", sa.Float(53), nullable=True),
    sa.Column("vsum", sa.Float(53), nullable=False),
    sa.Column("finite", sa.BigInteger, nullable=False),
    sa.Column("total", sa.BigInteger, nullable=False),
    sa.Column("last_step", sa.BigInteger, nullable=False),
    sa.Column("last_value", sa.Float(53), nullable=False),
    sa.Column("last_time", sa.Float(53), nullable=False),
    sa.Column("nan", sa.BigInteger, nullable=False),
    sa.Column("pos_inf", sa.BigInteger, nullable=False),
    sa.Column("neg_inf", sa.BigInteger, nullable=False),
    sa.Column("chunk", sa.BigInteger, nullable=False),
)

chunks = sa.Table(
    "chunks",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.String(16), primary_key=True),
    sa.Column("level", sa.SmallInteger, nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.Float(53), nullable=False),
)

actors = sa.Table(
    "actors",
    metadata,
    sa.Column("run_pk", sa.BigInteger, primary_key=True),
    sa.Column("source", sa.String(16), primary_key=True),
    sa.Column("actor", sa.String(128), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("gpu", sa.String(200), nullable=True),
    sa.Column("first_step", sa.BigInteger, nullable=False),
    sa.Column("last_step", sa.BigInteger, nullable=False),
    sa.Column("steps", sa.BigInteger, nullable=False),
    sa.Column("first_time", sa.Float(53), nullable=False),
    sa.Column("last_time", sa.Float(53), nullable=False),
)


def _bucket_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("run_pk", sa.BigInteger, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("step", sa.BigInteger, nullable=False),
        sa.Column("basis", sa.String(16), nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("lo", sa.Float(53), nullable=False),
        sa.Column("hi", sa.Float(53), nullable=False),
        sa.Column("tokens", sa.Float(53), nullable=False),
        sa.Column("sum_d", sa.Float(53), nullable=False),
        sa.Column("sum_abs_d", sa.Float(53), nullable=False),
        sa.Column("sum_k3", sa.Float(53), nullable=False),
        sa.Column("sum_reverse_k3", sa.Float(53), nullable=False),
        sa.Column("oob", sa.Float(53), nullable=False),
    ]


bucket_hot = sa.Table("bucket_hot", metadata, *_bucket_columns())

bucket_blocks = sa.Table(
    "bucket_blocks",
    metadata,
    *(c for c in _bucket_columns() if c.name != "step"),
    sa.Column("block", sa.BigInteger, nullable=False),
    sa.Column("gpu", sa.String(200), nullable=True),  # a block never mixes GPU segments
    sa.Column("step_lo", sa.BigInteger, nullable=False),
    sa.Column("step_hi", sa.BigInteger, nullable=False),
    sa.Column("steps", sa.BigInteger, nullable=False),
    sa.Column("chunk", sa.BigInteger, nullable=False),
)

bucket_rows = sa.Table(
    "bucket_rows",
    metadata,
    *_bucket_columns(),
    sa.Column("chunk", sa.BigInteger, nullable=False),
)

run_annotations = sa.Table(
    "annotations",
    metadata,
    sa.Column("id", sa.String(128), primary_key=True),  # unique within its run
    sa.Column("run_pk", sa.BigInteger, primary_key=True),
    sa.Column("step", sa.BigInteger, nullable=True),
    sa.Column("time", sa.Float(53), nullable=False),
    sa.Column("kind", sa.String(128), nullable=False),
    sa.Column("source", sa.String(16), nullable=True),
    sa.Column("actor", sa.String(128), nullable=True),
    sa.Column("text", sa.Text, nullable=False),
)
sa.Index("ix_annotations_run", run_annotations.c.run_pk)

exemplars = sa.Table(
    "exemplars",
    metadata,
    sa.Column("run_pk", sa.BigInteger, primary_key=True),
    sa.Column("step", sa.BigInteger, primary_key=True),
    sa.Column("source", sa.String(16), primary_key=True),
    sa.Column("actor", sa.String(128), primary_key=True),
    sa.Column("kind", sa.String(16), primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("pos", sa.BigInteger, primary_key=True),
    sa.Column("rollout_logprob", sa.Float(53), nullable=False),
    sa.Column("trainer_logprob", sa.Float(53), nullable=False),
    sa.Column("token_id", sa.BigInteger, nullable=True),
    sa.Column("token", sa.String(100), nullable=True),
    sa.Column("context", sa.String(400), nullable=True),
)
"""Token exemplars: at most a bounded number per step record (the schema's limit), opt-in, so
the table stays small enough for a primary key, which is what makes a re-sent one a no-op."""

server_secrets = sa.Table(
    "server_secrets",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float(53), nullable=False),
)
# PostgreSQL only: indexes on rollups (series_id, level, block; unique since migration 0010),
# bucket_rows (run_pk, step) and bucket_blocks (run_pk), and the value table behind `points`
# (see the module docstring). DuckDB reads through the min/max statistics of the sorted chunks
# instead: indexes there live in memory and slow appends.

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id_hash", sa.String(64), primary_key=True),  # SHA-256 of the cookie's session id
    sa.Column("token_id", sa.String(32), nullable=False),
    sa.Column("created_at", sa.Float(53), nullable=False),
    sa.Column("expires_at", sa.Float(53), nullable=False),
)
"""Dashboard sessions (migration 0009): a signed cookie names one of these rows, so signing out
deletes the row and the cookie is refused everywhere, on every replica, from then on."""
