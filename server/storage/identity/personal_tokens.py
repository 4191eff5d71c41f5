"""The `personal_tokens` table: people's own API tokens, made, listed, revoked and read back
for authentication. Only a salted hash of a secret is stored (`server.auth`); rights (who may
make or revoke which) are the personal token service's."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from server.domain.identity import PersonalToken
from server.storage.schema.identity_tables import personal_tokens

_c = personal_tokens.c
_INFO = (
    *(_c.id, _c.owner, _c.email, _c.shown, _c.name),
    *(_c.created_at, _c.created_by, _c.revoked_at),
)


def insert(conn: Connection, token: PersonalToken, *, salt: str, hash: str) -> None:
    conn.execute(sa.insert(personal_tokens).values(**token.__dict__, salt=salt, hash=hash))


def credentials(conn: Connection, token_id: str) -> tuple[PersonalToken, str, str] | None:
    """A token by id with its salt and hash (what checking a presented secret needs)."""
    query = sa.select(*_INFO, _c.salt, _c.hash).where(_c.id == token_id)
    row = conn.execute(query).first()
    return None if row is None else (_token(row), row.salt, row.hash)


def listed(
    conn: Connection, *, owner: str | None, include_revoked: bool = False
) -> list[PersonalToken]:
    """Tokens in the order they were made, of `owner` (a person's id; None: everybody's)."""
    query = sa.select(*_INFO)
    if owner is not None:
        query = query.where(_c.owner == owner)
    if not include_revoked:
        query = query.where(_c.revoked_at.is_(None))
    return [_token(row) for row in conn.execute(query.order_by(_c.created_at, _c.id))]


def get(conn: Connection, token_id: str) -> PersonalToken | None:
    row = conn.execute(sa.select(*_INFO).where(_c.id == token_id)).first()
    return None if row is None else _token(row)


def revoke(conn: Connection, token_id: str, *, now: float) -> None:
    """Mark a token revoked at `now`; one already revoked keeps its first time."""
    query = sa.update(personal_tokens).where(_c.id == token_id, _c.revoked_at.is_(None))
    conn.execute(query.values(revoked_at=now))


def _token(row: Any) -> PersonalToken:
    return PersonalToken(
        id=row.id,
        owner=row.owner,
        email=row.email,
        shown=row.shown or row.owner,
        name=row.name,
        created_at=row.created_at,
        created_by=row.created_by,
        revoked_at=row.revoked_at,
    )
