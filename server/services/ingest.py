"""The ingest service: check the caller's rights, write one batch in one transaction, then tell
the listeners (alarms, metrics export) what was newly stored. A listener's failure never fails
an ingest that is already committed: it is logged.

It takes a domain `Batch` (the route and the command line map the ingest contract onto one,
`server.schemas.batches`) and answers the `WriteResult`. How the batch is committed — grouped
with concurrent ones on DuckDB, on its own on PostgreSQL — is storage's
(`server.storage.writing.commits`).
"""

from __future__ import annotations

import logging
from typing import Protocol

from server.auth import Principal
from server.domain.names import DEFAULT_PROJECT
from server.domain.records import Batch, BatchWrite, WriteResult
from server.errors import Forbidden, Rejected
from server.storage.db import Database
from server.storage.writing.commits import committer

log = logging.getLogger("mismatch_monitor.ingest")


class IngestListener(Protocol):
    def on_ingested(self, result: WriteResult) -> None: ...


class IngestService:
    def __init__(self, db: Database, *, listeners: list[IngestListener] | None = None) -> None:
        self.listeners: list[IngestListener] = list(listeners or [])
        self._committer = committer(db)

    def ingest(self, batch: Batch, principal: Principal, *, notify: bool = True) -> WriteResult:
        """Store `batch` with `principal`'s rights: a project's token writes its own project
        only, and a run the batch creates lands there. A batch that names its project (ingest
        format 2) writes only runs of that project, so a run id other projects also use is
        never ambiguous. `notify` False: the alerts its steps raise are recorded but nobody is
        sent them (an import of a run's past)."""
        project: str | None = None
        if not principal.is_server_admin:
            if principal.scope not in ("ingest", "admin"):
                raise Forbidden(f"this token has scope {principal.scope!r}; ingest needs 'ingest'")
            assert principal.project is not None
            project = principal.project
            for named in (batch.project, batch.run.project if batch.run else None):
                if named not in (None, project):
                    raise Forbidden(f"this token writes project {project!r}, not {named!r}")
        claimed = batch.project
        if batch.run is not None and batch.run.project not in (None, claimed) and claimed:
            raise Rejected(
                f"the batch names project {claimed!r} but its run names {batch.run.project!r}: "
                "send one project for both (the run's project is the batch's)"
            )
        scope = project or claimed
        result = self._committer.commit(
            BatchWrite(
                batch.run,
                batch.records,
                batch.annotations,
                default_project=scope or DEFAULT_PROJECT,
                project=scope,
            )
        )
        result.notify = notify
        for listener in self.listeners:
            try:
                listener.on_ingested(result)
            except Exception:
                log.exception("ingest listener %r failed", listener)
        return result

    def close(self) -> None:
        """Write the batches already queued, then stop."""
        self._committer.close()
