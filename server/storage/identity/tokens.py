"""The `tokens` table: token rows made, listed, revoked and read back for authentication.

Only a salted hash of a token's secret is stored (`server.auth`). Rights (who may mint or revoke
which token) are the token service's; these functions only read and write rows, in the
caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.domain.tokens import TokenCredentials, TokenInfo
from server.storage.schema import tables as t

_c = t.tokens.c
_INFO = (_c.id, _c.project, _c.scope, _c.name, _c.created_at, _c.revoked_at)


def insert(
    conn: Connection,
    *,
    token_id: str,
    project: str,
    scope: str,
    name: str,
    salt: str,
    hash: str,
    created_at: float,
) -> None:
    conn.execute(
        sa.insert(t.tokens).values(
            id=token_id,
            project=project,
            scope=scope,
            name=name,
            salt=salt,
            hash=hash,
            created_at=created_at,
        )
    )


def listed(
    conn: Connection,
    *,
    project: str | None = None,
    projects: Sequence[str] | None = None,
    include_revoked: bool = False,
) -> list[TokenInfo]:
    """Tokens in the order they were made: of `project` if given, among `projects` (None: all),
    the revoked ones too if asked."""
    query = sa.select(*_INFO)
    if project is not None:
        query = query.where(_c.project == project)
    if projects is not None:
        query = query.where(_c.project.in_(list(projects)))
    if not include_revoked:
        query = query.where(_c.revoked_at.is_(None))
    return [_info(row) for row in conn.execute(query.order_by(_c.created_at))]


def get(conn: Connection, token_id: str) -> TokenInfo | None:
    """A token by id, revoked or not."""
    row = conn.execute(sa.select(*_INFO).where(_c.id == token_id)).first()
    return None if row is None else _info(row)


def active(conn: Connection, token_id: str) -> TokenInfo | None:
    """A token by id while it is not revoked."""
    query = sa.select(*_INFO).where(_c.id == token_id, _c.revoked_at.is_(None))
    row = conn.execute(query).first()
    return None if row is None else _info(row)


def revoke(conn: Connection, token_id: str, *, now: float) -> None:
    """Mark a token revoked at `now`; one already revoked keeps its first time."""
    conn.execute(
        sa.update(t.tokens).where(_c.id == token_id, _c.revoked_at.is_(None)).values(revoked_at=now)
    )


def any_active(conn: Connection) -> bool:
    """Whether any token is not revoked (which turns authentication on)."""
    query = sa.select(_c.id).where(_c.revoked_at.is_(None)).limit(1)
    return conn.execute(query).first() is not None


def credentials(conn: Connection, token_id: str) -> TokenCredentials | None:
    """What checking the token `token_id` needs, revoked or not; None for an unknown id."""
    query = sa.select(_c.project, _c.scope, _c.salt, _c.hash, _c.revoked_at).where(
        _c.id == token_id
    )
    row = conn.execute(query).first()
    return None if row is None else TokenCredentials(*row)


def _info(row: Any) -> TokenInfo:
    return TokenInfo(*row)
