"""A project's reference run: the run alert notifications and the compare view measure others
against. Keyed by project name and holding the run's id as text, independent of the runs
table's keys.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "project_references",
        sa.Column("project", sa.String(128), primary_key=True),
        sa.Column("run_id", sa.String(128), nullable=False),
        sa.Column("set_at", sa.Float(53), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("project_references")
