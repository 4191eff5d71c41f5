"""The typed container of the server's services, built by the composition root (`app.py`) and
read by the API's dependencies and the dashboard. A field per service: nothing is looked up by
name, so a missing or mistyped wiring fails the type check, not a request."""

from __future__ import annotations

from dataclasses import dataclass

from server.alarms.wiring import Alarms
from server.config import Settings
from server.identity.local_access import LocalAccess
from server.identity.wiring import People
from server.services.ingest import IngestService
from server.services.maintenance import Maintenance
from server.services.projects import ProjectService
from server.services.reads.port import Reads
from server.services.sessions import Sessions
from server.services.tokens import TokenService
from server.storage.db import Database
from server.telemetry import Telemetry


@dataclass
class Services:
    settings: Settings
    db: Database
    reads: Reads  # the read services: the read port of the API and the dashboard
    ingest: IngestService
    tokens: TokenService
    telemetry: Telemetry
    maintenance: Maintenance
    sessions: Sessions
    projects: ProjectService
    people: People
    local: LocalAccess  # the way in for the person at a loopback server's machine
    alarms: Alarms | None = None  # None when the server runs with alarms off

    def start(self) -> None:
        """Start the background work (compaction, alarm delivery, housekeeping)."""
        self.maintenance.start()
        if self.alarms is not None:
            self.alarms.start()

    def close(self) -> None:
        """Stop the background work, write what is queued, release the database."""
        if self.alarms is not None:
            self.alarms.stop()
        self.local.close()
        self.ingest.close()
        self.maintenance.stop()
        self.db.dispose()
