"""Dashboard session rows: made at sign-in, read by every request that carries the cookie,
deleted at sign-out. A row is keyed by the SHA-256 of the session id the cookie holds, so the
table alone lets nobody forge a cookie."""

from __future__ import annotations

import hashlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.storage.schema import tables as t


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def create(
    conn: Connection, *, session_id: str, token_id: str, now: float, expires_at: float
) -> None:
    """Store a new session; sessions that expired are dropped on the way (they are refused
    anyway, this only keeps the table small)."""
    s = t.sessions.c
    conn.execute(sa.delete(t.sessions).where(s.expires_at < now))
    conn.execute(
        sa.insert(t.sessions).values(
            id_hash=_key(session_id), token_id=token_id, created_at=now, expires_at=expires_at
        )
    )


def active(conn: Connection, *, session_id: str, token_id: str, now: float) -> Any | None:
    """The (project, scope) of the session's token when the session exists, has not expired,
    belongs to `token_id`, and its token is not revoked; else None."""
    s, k = t.sessions.c, t.tokens.c
    query = (
        sa.select(k.project, k.scope)
        .select_from(t.sessions.join(t.tokens, k.id == s.token_id))
        .where(
            s.id_hash == _key(session_id),
            s.token_id == token_id,
            s.expires_at > now,
            k.revoked_at.is_(None),
        )
    )
    return conn.execute(query).first()


def delete(conn: Connection, *, session_id: str) -> bool:
    """End a session; whether it existed."""
    s = t.sessions.c
    return bool(conn.execute(sa.delete(t.sessions).where(s.id_hash == _key(session_id))).rowcount)
