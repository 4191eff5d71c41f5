"""Who did what: each change to a project's rules, receivers, silences, reference, retention,
tokens and members is recorded with the person (or token) that made it, and listed to those
who may read the project."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence

from server import auth
from server.domain.identity import Change
from server.domain.reads.scope import ReadScope
from server.services.reads.changes import ChangeReads
from server.storage.alarms import changes as stored
from server.storage.db import Database

MAX_SUMMARY = 500
MAX_NAME = 320


class Changes:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._reads = ChangeReads(db)

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
            actor_name=by.actor_name[:MAX_NAME],
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
        """The newest changes among `projects` (None: all): the read port's query, so the API
        and the dashboard list the same."""
        return self._reads.recent(ReadScope.of(projects), project=project, kind=kind, limit=limit)

    def last_actors(
        self, kind: str, object_ids: Sequence[str], *, projects: Sequence[str] | None
    ) -> dict[str, Change]:
        """The latest change of each of `object_ids` (of `kind`): who last changed it."""
        return self._reads.last_of(ReadScope.of(projects), kind, object_ids)
