"""API tokens as the token service and storage hand them on: what a token is (never its secret)
and what checking one needs (its salted hash)."""

from __future__ import annotations

from dataclasses import dataclass

from server.domain.scopes import Scope


@dataclass(frozen=True)
class TokenInfo:
    """A token as lists and the API show it: who it belongs to and what it may do."""

    id: str
    project: str
    scope: Scope
    name: str
    created_at: float
    revoked_at: float | None


@dataclass(frozen=True)
class TokenCredentials:
    """What checking a presented token needs: the salt and hash of its secret (the secret itself
    is never stored), and whether it still counts."""

    project: str
    scope: Scope
    salt: str
    hash: str
    revoked_at: float | None
