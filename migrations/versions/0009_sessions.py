"""Dashboard sessions kept on the server: a signed cookie names a session row, and signing out
deletes it, so a copied cookie stops working at once (on every replica sharing the database)
instead of living out its lifetime. Cookies issued before this revision name no row and are
refused: users sign in again once.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("token_id", sa.String(32), nullable=False),
        sa.Column("created_at", sa.Float(53), nullable=False),
        sa.Column("expires_at", sa.Float(53), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sessions")
