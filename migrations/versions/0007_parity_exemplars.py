"""Parity reports and token exemplars: a run has a kind ("training", or "parity" for a report
of `mismatch parity`), and a step record may keep a bounded set of token exemplars (the tokens
of largest |log-ratio| and a uniform sample, with both sides' logprobs and where they sit).

Existing runs are training runs: the column's default fills them in. DuckDB refuses to alter a
table that indexes depend on, so there the runs table's indexes are dropped around the change.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

F = sa.Float(53)
BIG = sa.BigInteger
RUN_INDEXES = (("ix_runs_project", ["project"]), ("ix_runs_id", ["id"]))


def _is_pg() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def _without_run_indexes(change: Callable[[], None]) -> None:
    if _is_pg():
        change()
        return
    for name, _ in RUN_INDEXES:
        op.drop_index(name, table_name="runs")
    change()
    for name, columns in RUN_INDEXES:
        op.create_index(name, "runs", columns)


def upgrade() -> None:
    _without_run_indexes(
        lambda: op.add_column(
            "runs", sa.Column("kind", sa.String(16), nullable=False, server_default="training")
        )
    )
    op.create_table(
        "exemplars",
        sa.Column("run_pk", BIG, primary_key=True),
        sa.Column("step", BIG, primary_key=True),
        sa.Column("source", sa.String(16), primary_key=True),
        sa.Column("actor", sa.String(128), primary_key=True),
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("seq", BIG, primary_key=True),
        sa.Column("pos", BIG, primary_key=True),
        sa.Column("rollout_logprob", F, nullable=False),
        sa.Column("trainer_logprob", F, nullable=False),
        sa.Column("token_id", BIG, nullable=True),
        sa.Column("token", sa.String(100), nullable=True),
        sa.Column("context", sa.String(400), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("exemplars")
    _without_run_indexes(lambda: op.drop_column("runs", "kind"))
