"""People: users and groups mapped to projects with roles, the sessions of people signed in
through OpenID Connect, the sign-ins under way (one use each: a replayed state finds nothing),
and the record of who changed a project's configuration.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "members",
        sa.Column("kind", sa.String(8), primary_key=True),
        sa.Column("name", sa.String(320), primary_key=True),
        sa.Column("project", sa.String(128), primary_key=True),
        sa.Column("role", sa.String(8), nullable=False),
        sa.Column("created_at", sa.Float(53), nullable=False),
        sa.Column("created_by", sa.String(400), nullable=False),
    )
    op.create_table(
        "user_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("names", sa.Text, nullable=False),
        sa.Column("groups", sa.Text, nullable=False),
        sa.Column("shown", sa.String(320), nullable=False),
        sa.Column("created_at", sa.Float(53), nullable=False),
        sa.Column("expires_at", sa.Float(53), nullable=False),
        sa.Column("ends_at", sa.Float(53), nullable=False),
    )
    op.create_table(
        "oidc_logins",
        sa.Column("state_hash", sa.String(64), primary_key=True),
        sa.Column("nonce", sa.String(128), nullable=False),
        sa.Column("verifier", sa.String(128), nullable=False),
        sa.Column("next_path", sa.Text, nullable=False),
        sa.Column("expires_at", sa.Float(53), nullable=False),
    )
    op.create_table(
        "changes",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("changed_at", sa.Float(53), nullable=False),
        sa.Column("project", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("object_id", sa.String(400), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(400), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
    )
    op.create_index("changes_by_project", "changes", ["project", "changed_at"])


def downgrade() -> None:
    op.drop_index("changes_by_project", table_name="changes")
    for table in ("changes", "oidc_logins", "user_sessions", "members"):
        op.drop_table(table)
