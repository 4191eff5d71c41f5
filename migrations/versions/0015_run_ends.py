"""A run's end: when a run that was finished or failed ended, so the runs list and run page can
say how and when each run ended. Runs already marked ended (imports) take their last activity.
DuckDB refuses to alter a table that indexes depend on, so there the runs table's indexes are
dropped around the change (as 0007 does).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


RUN_INDEXES = (("ix_runs_project", ["project"]), ("ix_runs_id", ["id"]))


def _without_run_indexes(change: Callable[[], None]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        change()
        return
    for name, _ in RUN_INDEXES:
        op.drop_index(name, table_name="runs")
    change()
    for name, columns in RUN_INDEXES:
        op.create_index(name, "runs", columns)


def upgrade() -> None:
    _without_run_indexes(
        lambda: op.add_column("runs", sa.Column("ended_at", sa.Float(53), nullable=True))
    )
    op.execute(
        "UPDATE runs SET ended_at = coalesce(last_seen, created_at) "
        "WHERE status IN ('finished', 'failed')"
    )


def downgrade() -> None:
    _without_run_indexes(lambda: op.drop_column("runs", "ended_at"))
