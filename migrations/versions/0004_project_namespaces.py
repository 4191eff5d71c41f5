"""Run ids per project, annotation ids per run, and the server's own secrets.

A run is now keyed by (project, id): two teams may both call a run `grpo-v1`. An annotation id
is unique within its run only, so one project cannot block another's annotation by sending its
id first. `server_secrets` holds what signs dashboard sessions, so a restart (or a second
replica on PostgreSQL) keeps users signed in.

DuckDB cannot drop a constraint, so there the two tables are rebuilt and their rows copied; the
run `pk`s stay what they were (every other table refers to runs by pk).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

F = sa.Float(53)
RUN_COLUMNS = (
    "pk, id, project, name, tags, labels, config, status, created_at, last_seen, last_step, "
    "raw_dropped_at"
)
ANNOTATION_COLUMNS = "id, run_pk, step, time, kind, source, actor, text"


def _is_pg() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def upgrade() -> None:
    if _is_pg():
        op.drop_constraint("runs_id_key", "runs", type_="unique")
        op.create_unique_constraint("uq_runs_project_id", "runs", ["project", "id"])
        op.drop_constraint("annotations_pkey", "annotations", type_="primary")
        op.create_primary_key("annotations_pkey", "annotations", ["run_pk", "id"])
    else:
        _rebuild_runs(unique=["project", "id"])
        _rebuild_annotations(key=["run_pk", "id"])
    op.create_index("ix_runs_id", "runs", ["id"])
    op.create_table(
        "server_secrets",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("created_at", F, nullable=False),
    )


def downgrade() -> None:
    """Back to one run namespace; refused while two projects share a run id."""
    op.drop_table("server_secrets")
    op.drop_index("ix_runs_id", table_name="runs")
    shared = (
        op.get_bind()
        .execute(sa.text("SELECT id FROM runs GROUP BY id HAVING count(*) > 1 LIMIT 1"))
        .first()
    )
    if shared is not None:
        raise RuntimeError(f"run id {shared[0]!r} is used by several projects; rename one first")
    if _is_pg():
        op.drop_constraint("annotations_pkey", "annotations", type_="primary")
        op.create_primary_key("annotations_pkey", "annotations", ["id"])
        op.drop_constraint("uq_runs_project_id", "runs", type_="unique")
        op.create_unique_constraint("runs_id_key", "runs", ["id"])
    else:
        _rebuild_runs(unique=["id"])
        _rebuild_annotations(key=["id"])


def _rebuild_runs(*, unique: list[str]) -> None:
    op.create_table(
        "runs_next",
        sa.Column(
            "pk", sa.BigInteger, server_default=sa.text("nextval('runs_pk_seq')"), primary_key=True
        ),
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("tags", sa.Text, nullable=False, server_default="[]"),
        sa.Column("labels", sa.Text, nullable=False, server_default="{}"),
        sa.Column("config", sa.Text, nullable=False, server_default="{}"),
        sa.Column("status", sa.String(16), nullable=False, server_default="running"),
        sa.Column("created_at", F, nullable=False),
        sa.Column("last_seen", F, nullable=True),
        sa.Column("last_step", sa.BigInteger, nullable=True),
        sa.Column("raw_dropped_at", F, nullable=True),
        sa.UniqueConstraint(*unique),
    )
    op.execute(f"INSERT INTO runs_next ({RUN_COLUMNS}) SELECT {RUN_COLUMNS} FROM runs")
    op.drop_index("ix_runs_project", table_name="runs")
    op.drop_table("runs")
    op.rename_table("runs_next", "runs")
    op.create_index("ix_runs_project", "runs", ["project"])


def _rebuild_annotations(*, key: list[str]) -> None:
    op.create_table(
        "annotations_next",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("run_pk", sa.BigInteger, nullable=False),
        sa.Column("step", sa.BigInteger, nullable=True),
        sa.Column("time", F, nullable=False),
        sa.Column("kind", sa.String(128), nullable=False),
        sa.Column("source", sa.String(16), nullable=True),
        sa.Column("actor", sa.String(128), nullable=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint(*key),
    )
    op.execute(
        f"INSERT INTO annotations_next ({ANNOTATION_COLUMNS}) "
        f"SELECT {ANNOTATION_COLUMNS} FROM annotations"
    )
    op.drop_index("ix_annotations_run", table_name="annotations")
    op.drop_table("annotations")
    op.rename_table("annotations_next", "annotations")
    op.create_index("ix_annotations_run", "annotations", ["run_pk"])
