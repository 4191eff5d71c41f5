"""Secrets the server makes for itself (what signs dashboard sessions), kept in the database so
a restart, or a second replica on the same PostgreSQL, keeps users signed in."""

from __future__ import annotations

import secrets
import time

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from server.storage.db import Database
from server.storage.schema import tables as t


def load_or_create(db: Database, name: str) -> str:
    """The secret called `name`, made at first use; replicas racing to make it agree on one."""
    fresh = secrets.token_urlsafe(48)
    with db.write() as conn:
        conn.execute(
            pg_insert(t.server_secrets)
            .values(name=name, value=fresh, created_at=time.time())
            .on_conflict_do_nothing(index_elements=["name"])
        )
        stored = conn.execute(
            sa.select(t.server_secrets.c.value).where(t.server_secrets.c.name == name)
        ).scalar_one()
    return str(stored)
