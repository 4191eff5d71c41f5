"""Which projects received the default rule pack, so that every project gets it exactly once.

A project can be made by live ingest, an import, a token or a rule created through the API;
each gives it the pack once, and this table remembers that it did: a team that deletes the
pack's rules on purpose does not get them back. Projects that have rules today received the pack
when live ingest made them, and are recorded so. Those without rules (made by an import) get it
once when the server next starts (`AlarmService`), since the pack's rules are the
application's, not the schema's.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "project_packs",
        sa.Column("project", sa.String(128), primary_key=True),
        sa.Column("pack", sa.String(32), primary_key=True),
        sa.Column("received_at", sa.Float(53), nullable=False),
    )
    op.execute(
        "INSERT INTO project_packs (project, pack, received_at) "
        "SELECT DISTINCT project, 'default', 0 FROM alarm_rules"
    )


def downgrade() -> None:
    op.drop_table("project_packs")
