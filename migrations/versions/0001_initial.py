"""Initial schema: projects, tokens, runs, step records, series, points, buckets, annotations.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.schema import CreateSequence, DropSequence

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

F = sa.Float(53)


def upgrade() -> None:
    runs_seq = sa.Sequence("runs_pk_seq")
    series_seq = sa.Sequence("series_id_seq")
    op.execute(CreateSequence(runs_seq))
    op.execute(CreateSequence(series_seq))
    op.create_table(
        "projects",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("created_at", F, nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("name", sa.String(200), nullable=False, server_default=""),
        sa.Column("salt", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(128), nullable=False),
        sa.Column("created_at", F, nullable=False),
        sa.Column("revoked_at", F, nullable=True),
    )
    op.create_table(
        "runs",
        sa.Column("pk", sa.BigInteger, server_default=runs_seq.next_value(), primary_key=True),
        sa.Column("id", sa.String(128), nullable=False, unique=True),
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("tags", sa.Text, nullable=False, server_default="[]"),
        sa.Column("labels", sa.Text, nullable=False, server_default="{}"),
        sa.Column("config", sa.Text, nullable=False, server_default="{}"),
        sa.Column("status", sa.String(16), nullable=False, server_default="running"),
        sa.Column("created_at", F, nullable=False),
        sa.Column("last_seen", F, nullable=True),
        sa.Column("last_step", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_runs_project", "runs", ["project"])
    _data_tables(series_seq)


def _data_tables(series_seq: sa.Sequence) -> None:
    """What runs report: step records, series and their points, buckets, annotations."""
    op.create_table(
        "step_records",
        sa.Column("run_pk", sa.BigInteger, primary_key=True),
        sa.Column("source", sa.String(16), primary_key=True),
        sa.Column("actor", sa.String(128), primary_key=True),
        sa.Column("step", sa.BigInteger, primary_key=True),
        sa.Column("time", F, nullable=False),
        sa.Column("gpu", sa.String(200), nullable=True),
        sa.Column("weight_version", sa.BigInteger, nullable=True),
    )
    op.create_table(
        "series",
        sa.Column("id", sa.BigInteger, server_default=series_seq.next_value(), primary_key=True),
        sa.Column("run_pk", sa.BigInteger, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("metric", sa.String(200), nullable=False),
        sa.UniqueConstraint("run_pk", "source", "actor", "metric", name="uq_series_key"),
    )
    op.create_table(
        "points",
        sa.Column("series_id", sa.BigInteger, nullable=False),
        sa.Column("step", sa.BigInteger, nullable=False),
        sa.Column("value", F, nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        # PostgreSQL reads a series through this index. DuckDB keeps indexes in memory and
        # slows appends with them; its zone maps on the append-ordered table serve instead.
        op.create_index("ix_points_series_step", "points", ["series_id", "step"])
    op.create_table(
        "bucket_rows",
        sa.Column("run_pk", sa.BigInteger, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("step", sa.BigInteger, nullable=False),
        sa.Column("basis", sa.String(16), nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("lo", F, nullable=False),
        sa.Column("hi", F, nullable=False),
        sa.Column("tokens", F, nullable=False),
        sa.Column("sum_d", F, nullable=False),
        sa.Column("sum_abs_d", F, nullable=False),
        sa.Column("sum_k3", F, nullable=False),
        sa.Column("sum_reverse_k3", F, nullable=False),
        sa.Column("oob", F, nullable=False),
    )
    op.create_table(
        "annotations",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("run_pk", sa.BigInteger, nullable=False),
        sa.Column("step", sa.BigInteger, nullable=True),
        sa.Column("time", F, nullable=False),
        sa.Column("kind", sa.String(128), nullable=False),
        sa.Column("source", sa.String(16), nullable=True),
        sa.Column("actor", sa.String(128), nullable=True),
        sa.Column("text", sa.Text, nullable=False),
    )
    op.create_index("ix_annotations_run", "annotations", ["run_pk"])
    op.create_index("ix_bucket_rows_run_step", "bucket_rows", ["run_pk", "step"])


def downgrade() -> None:
    for table in (
        "annotations",
        "bucket_rows",
        "points",
        "series",
        "step_records",
        "runs",
        "tokens",
        "projects",
    ):
        op.drop_table(table)
    op.execute(DropSequence(sa.Sequence("series_id_seq")))
    op.execute(DropSequence(sa.Sequence("runs_pk_seq")))
