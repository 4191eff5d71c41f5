"""Incidents: an alert records the incident it belongs to (the id of the incident's first alert),
so that a run's alerts firing close together go out as one notification and resolve together.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _is_pg() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def upgrade() -> None:
    op.add_column("alerts", sa.Column("incident_id", sa.String(64), nullable=True))
    if _is_pg():  # DuckDB's indexes live in memory; its alert reads scan a small table
        op.create_index("ix_alerts_incident", "alerts", ["incident_id"])
        op.create_index("ix_alerts_run_state", "alerts", ["run_id", "state"])


def downgrade() -> None:
    if _is_pg():
        op.drop_index("ix_alerts_run_state", table_name="alerts")
        op.drop_index("ix_alerts_incident", table_name="alerts")
    op.drop_column("alerts", "incident_id")
