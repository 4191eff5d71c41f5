"""Token scopes: what a token may do, within its project."""

from __future__ import annotations

from typing import Literal

Scope = Literal["ingest", "read", "admin"]
SCOPES: tuple[Scope, ...] = ("ingest", "read", "admin")
