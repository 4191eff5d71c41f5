"""The token service over its storage, on each database: rights decide, rows remember.

A revoked token stays revoked from its first revocation on; another project's token is as
unknown as a missing one; a presented token authenticates only while it is active.
"""

from __future__ import annotations

import pytest

from server import auth
from server.errors import NotFound, Unauthorized
from server.services.tokens import TokenService
from server.storage.db import Database


def test_revoking_twice_keeps_the_first_revocation_time(migrated_db: Database) -> None:
    tokens = TokenService(migrated_db)
    info, _ = tokens.create(project="p", scope="read")
    first = tokens.revoke(info.id)
    again = tokens.revoke(info.id)
    assert first.revoked_at is not None
    assert again.revoked_at == first.revoked_at
    assert [t.id for t in tokens.list()] == []
    assert [t.id for t in tokens.list(include_revoked=True)] == [info.id]


def test_another_projects_token_is_as_unknown_as_a_missing_one(migrated_db: Database) -> None:
    tokens = TokenService(migrated_db)
    theirs, _ = tokens.create(project="b", scope="ingest")
    with pytest.raises(NotFound, match="no token"):
        tokens.revoke(theirs.id, projects=["a"])
    with pytest.raises(NotFound, match="no token"):
        tokens.revoke("missing", projects=["a"])
    assert tokens.list(projects=["a"]) == []
    assert [t.id for t in tokens.list(projects=["b"])] == [theirs.id]
    assert tokens.principal_of(theirs.id) == auth.Principal(theirs.id, "b", "ingest")


def test_a_token_authenticates_while_active_and_never_after(migrated_db: Database) -> None:
    tokens = TokenService(migrated_db, require_tokens=True)
    info, token = tokens.create(project="p", scope="admin", name="ci")
    principal = tokens.authenticate(f"Bearer {token}")
    assert (principal.token_id, principal.project, principal.scope) == (info.id, "p", "admin")
    with pytest.raises(Unauthorized, match="invalid token"):
        tokens.authenticate(f"Bearer {token[:-1]}x")
    tokens.revoke(info.id)
    with pytest.raises(Unauthorized, match="revoked"):
        tokens.authenticate(f"Bearer {token}")
    assert tokens.principal_of(info.id) is None


def test_authentication_turns_on_with_the_first_active_token(migrated_db: Database) -> None:
    tokens = TokenService(migrated_db)
    assert not tokens.auth_enabled()
    info, _ = tokens.create(project="p", scope="read")
    assert tokens.auth_enabled()  # a new token clears what the service remembered
    tokens.revoke(info.id)
    assert not tokens.auth_enabled()
