"""The schema, as SQLAlchemy Core tables. `migrations/` builds exactly this from empty.

Design notes:
- Times are float Unix seconds: portable between DuckDB and PostgreSQL, no time-zone driver
  quirks, and what the collectors send.
- JSON documents (config, labels, tags) are stored as text and parsed by the storage layer, so the
  same code runs on both databases.
- Metric values live in a tall `points` table keyed by a small integer `series_id` (one per
  run × source × actor × metric). Ingest appends columnar batches to it; a series query scans
  integers. `points` has no primary key on purpose: DuckDB keeps primary keys as in-memory ART
  indexes that slow appends; uniqueness is enforced by the ingest path instead (see
  `storage/writes.py`).
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
    sa.Column("id", sa.String(128), nullable=False, unique=True),
    sa.Column("project", sa.String(128), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("tags", sa.Text, nullable=False, server_default="[]"),
    sa.Column("labels", sa.Text, nullable=False, server_default="{}"),
    sa.Column("config", sa.Text, nullable=False, server_default="{}"),
    sa.Column("status", sa.String(16), nullable=False, server_default="running"),
    sa.Column("created_at", sa.Float(53), nullable=False),
    sa.Column("last_seen", sa.Float(53), nullable=True),
    sa.Column("last_step", sa.BigInteger, nullable=True),
)
sa.Index("ix_runs_project", runs.c.project)

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
    sa.UniqueConstraint("run_pk", "source", "actor", "metric", name="uq_series_key"),
)

points = sa.Table(
    "points",
    metadata,
    sa.Column("series_id", sa.BigInteger, nullable=False),
    sa.Column("step", sa.BigInteger, nullable=False),
    sa.Column("value", sa.Float(53), nullable=False),
)

bucket_rows = sa.Table(
    "bucket_rows",
    metadata,
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
)

run_annotations = sa.Table(
    "annotations",
    metadata,
    sa.Column("id", sa.String(128), primary_key=True),
    sa.Column("run_pk", sa.BigInteger, nullable=False),
    sa.Column("step", sa.BigInteger, nullable=True),
    sa.Column("time", sa.Float(53), nullable=False),
    sa.Column("kind", sa.String(128), nullable=False),
    sa.Column("source", sa.String(16), nullable=True),
    sa.Column("actor", sa.String(128), nullable=True),
    sa.Column("text", sa.Text, nullable=False),
)
sa.Index("ix_annotations_run", run_annotations.c.run_pk)
sa.Index("ix_bucket_rows_run_step", bucket_rows.c.run_pk, bucket_rows.c.step)
# PostgreSQL only (see migration 0001): ix_points_series_step on points (series_id, step).
