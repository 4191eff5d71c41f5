"""Maintenance beside ingest: compaction when the hot tables fill (or go quiet), retention on a
schedule. A background thread; failures are logged and retried next round, never raised into a
request."""

from __future__ import annotations

import logging
import threading
import time

from server.domain.compaction import CompactionResult
from server.domain.records import WriteResult
from server.domain.retention import RetentionResult
from server.storage.db import Database
from server.storage.writing import compaction, retention

log = logging.getLogger("mismatch_monitor.maintenance")

QUIET_S = 30.0  # compact what is hot after this long without a full round
RETENTION_EVERY_S = 3600.0


class Maintenance:
    def __init__(
        self,
        db: Database,
        *,
        hot_rows: int = compaction.HOT_ROWS,
        quiet_s: float = QUIET_S,
        retention_days: float | None = None,
    ) -> None:
        self._db = db
        self._hot_rows = hot_rows
        self._quiet_s = quiet_s
        self._retention_s = None if retention_days is None else retention_days * 86400
        self._pending = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0

    def on_ingested(self, result: WriteResult) -> None:
        """An ingest listener: counts what went to the hot tables, wakes compaction when due."""
        with self._lock:
            self._pending += result.values
            due = self._pending >= self._hot_rows
        if due:
            self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="mismatch-maintenance", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(60)

    def _loop(self) -> None:
        last_retention: float | None = None  # the first round retains at once
        while not self._stop.is_set():
            self._wake.wait(self._quiet_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            self.run_once()
            if self._retention_s is not None and (
                last_retention is None or time.monotonic() - last_retention > RETENTION_EVERY_S
            ):
                last_retention = time.monotonic()
                self._retain()

    def run_once(self) -> CompactionResult | None:
        """One compaction round (and the merges it makes due); None when it failed (logged,
        retried next round)."""
        with self._lock:
            self._pending = 0
        try:
            result = compaction.compact(self._db)
        except Exception:
            log.exception("compaction failed; it is retried next round")
            return None
        self.rounds += 1
        return result

    def retain(
        self, *, older_than_s: float, project: str | None = None, dry_run: bool = False
    ) -> RetentionResult:
        """Retention now (an admin's request, beside the schedule)."""
        return retention.drop_raw(
            self._db, older_than_s=older_than_s, project=project, dry_run=dry_run
        )

    def _retain(self) -> None:
        assert self._retention_s is not None
        try:
            found = retention.drop_raw(self._db, older_than_s=self._retention_s)
        except Exception:
            log.exception("retention failed; it is retried next round")
            return
        if found.runs:
            log.info("retention dropped the raw values of %d runs", len(found.runs))
