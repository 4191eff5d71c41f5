"""People's own API tokens: a token that belongs to a person and acts with that person's
project mappings at each request, so removing the mappings ends it too.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "personal_tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("owner", sa.String(320), nullable=False),
        sa.Column("names", sa.Text, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("salt", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(53), nullable=False),
        sa.Column("created_by", sa.String(400), nullable=False),
        sa.Column("revoked_at", sa.Float(53), nullable=True),
    )
    op.create_index("personal_tokens_by_owner", "personal_tokens", ["owner"])


def downgrade() -> None:
    op.drop_index("personal_tokens_by_owner", table_name="personal_tokens")
    op.drop_table("personal_tokens")
