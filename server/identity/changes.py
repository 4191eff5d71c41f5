"""Who did what: each change to a project's rules, receivers, silences, reference, retention,
tokens and members is recorded with the person (or token) that made it, and listed to those
who may read the project."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence

from server import auth
from server.domain.identity import Change
from server.storage import changes as stored
from server.storage.db import Database

MAX_SUMMARY = 500


class Changes:
    def __init__(self, db: Database) -> None:
        self._db = db

    def record(
        self,
        by: auth.Principal,
        *,
        project: str,
        kind: str,
        object_id: str,
        action: str,
        summary: str = "",
    ) -> Change:
        change = Change(
            id=secrets.token_hex(8),
            changed_at=time.time(),
            project=project,
            kind=kind,
            object_id=object_id,
            action=action,
            actor=by.actor,
            summary=summary[:MAX_SUMMARY],
        )
        with self._db.write() as conn:
            stored.insert(conn, change)
        return change

    def list(
        self,
        *,
        projects: Sequence[str] | None,
        project: str | None = None,
        kind: str | None = None,
        limit: int = 500,
    ) -> list[Change]:
        with self._db.read() as conn:
            return stored.listed(conn, projects=projects, project=project, kind=kind, limit=limit)

    def last_actors(
        self, kind: str, object_ids: Sequence[str], *, projects: Sequence[str] | None
    ) -> dict[str, Change]:
        """The latest change of each of `object_ids` (of `kind`): who last changed it."""
        if not object_ids:
            return {}
        with self._db.read() as conn:
            found = stored.listed(
                conn, projects=projects, kind=kind, object_ids=object_ids, limit=10_000
            )
        latest: dict[str, Change] = {}
        for change in found:  # newest first
            latest.setdefault(change.object_id, change)
        return latest
