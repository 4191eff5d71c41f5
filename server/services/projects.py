"""Project settings as a service: the reference run. Access is narrowed to the projects a caller
may see (`projects`; None means every project), as elsewhere."""

from __future__ import annotations

import time
from collections.abc import Sequence

from server.domain.projects import ProjectReference
from server.errors import NotFound
from server.storage.db import Database
from server.storage.reading import references
from server.storage.writing import runs


class ProjectService:
    def __init__(self, db: Database) -> None:
        self._db = db

    def set_reference(
        self, project: str, run_id: str, *, projects: Sequence[str] | None = None
    ) -> ProjectReference:
        """Make `run_id` (a run of `project`) the project's reference run."""
        _visible(project, projects)
        now = time.time()
        with self._db.write() as conn:
            found = [r for r in runs.load(conn, [run_id]).get(run_id, []) if r.project == project]
            if not found:
                raise NotFound(f"no run {run_id!r} in project {project!r}")
            references.put(conn, project, run_id, now)
        return ProjectReference(project, run_id, now)

    def reference(self, project: str, *, projects: Sequence[str] | None = None) -> ProjectReference:
        _visible(project, projects)
        with self._db.read() as conn:
            found = references.get(conn, project)
        if found is None:
            raise NotFound(
                f"project {project!r} has no reference run; set one with "
                "`mismatch project reference RUN`"
            )
        return ProjectReference(project, *found)


def _visible(project: str, projects: Sequence[str] | None) -> None:
    if projects is not None and project not in projects:
        raise NotFound(f"no project {project!r}")
