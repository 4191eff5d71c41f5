"""The ingest service: validate ownership, write one batch in one transaction, then tell the
listeners (alarms, metrics export) what was newly stored. A listener's failure never fails an
ingest that is already committed: it is logged."""

from __future__ import annotations

import logging
from typing import Protocol

from server.auth import Principal
from server.errors import Forbidden
from server.schemas.ingest import IngestIn, IngestOut
from server.storage.db import Database
from server.storage.writes import DEFAULT_PROJECT, WriteResult, write_batch

log = logging.getLogger("mismatch_monitor.ingest")


class IngestListener(Protocol):
    def on_ingested(self, result: WriteResult) -> None: ...


class IngestService:
    def __init__(self, db: Database, *, listeners: list[IngestListener] | None = None) -> None:
        self._db = db
        self.listeners: list[IngestListener] = list(listeners or [])

    def ingest(self, batch: IngestIn, principal: Principal) -> IngestOut:
        allowed: frozenset[str] | None = None
        default_project = DEFAULT_PROJECT
        if not principal.is_admin:
            if principal.scope != "ingest":
                raise Forbidden(f"this token has scope {principal.scope!r}; ingest needs 'ingest'")
            assert principal.project is not None
            allowed = frozenset({principal.project})
            default_project = principal.project
            if batch.run is not None and batch.run.project not in (None, principal.project):
                raise Forbidden(
                    f"this token writes project {principal.project!r}, not {batch.run.project!r}"
                )
        with self._db.write() as conn:
            result = write_batch(
                conn,
                self._db,
                run=batch.run,
                records=batch.records,
                annotations=batch.annotations,
                default_project=default_project,
                allowed_projects=allowed,
            )
        for listener in self.listeners:
            try:
                listener.on_ingested(result)
            except Exception:
                log.exception("ingest listener %r failed", listener)
        return IngestOut(
            accepted=result.accepted, duplicates=result.duplicates, annotations=result.annotations
        )
