"""Who changed what, as readers see it: the record of changes to a project's rules, receivers,
silences, reference, retention, tokens and members, within the reader's scope. One path for
`GET /api/v1/changes` and the dashboard's activity page, so a reader of one project sees
another's changes in neither."""

from __future__ import annotations

from collections.abc import Sequence

from server.domain.identity import Change
from server.domain.reads.scope import ReadScope
from server.storage.alarms import changes as stored
from server.storage.db import Database


class ChangeReads:
    def __init__(self, db: Database) -> None:
        self._db = db

    def recent(
        self,
        scope: ReadScope,
        *,
        project: str | None = None,
        kind: str | None = None,
        limit: int = 500,
    ) -> list[Change]:
        """The newest changes first, in the projects of `scope` (narrowed to `project`)."""
        projects = scope.narrowed(project).projects
        with self._db.read() as conn:
            return stored.listed(conn, projects=projects, kind=kind, limit=limit)

    def last_changed(
        self,
        scope: ReadScope,
        *,
        project: str | None = None,
        kind: str | None = None,
        limit: int = 500,
    ) -> list[Change]:
        """Each object's newest change, newest first: who changed each rule, receiver,
        silence, reference … last, and when."""
        projects = scope.narrowed(project).projects
        with self._db.read() as conn:
            return stored.latest(conn, projects=projects, kind=kind, limit=limit)

    def last_of(self, scope: ReadScope, kind: str, object_ids: Sequence[str]) -> dict[str, Change]:
        """The newest change of each of `object_ids` (of `kind`) by object id: who changed
        each of a listed set last."""
        if not object_ids:
            return {}
        with self._db.read() as conn:
            found = stored.listed(
                conn, projects=scope.projects, kind=kind, object_ids=object_ids, limit=10_000
            )
        latest: dict[str, Change] = {}
        for change in found:  # newest first
            latest.setdefault(change.object_id, change)
        return latest
