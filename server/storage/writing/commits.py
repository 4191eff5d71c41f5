"""How a batch is committed, the one place where the two databases' write disciplines differ
for ingest: `committer(db)` picks, and the ingest service sees only `Committer`.

PostgreSQL takes concurrent writers (row locks and `ON CONFLICT` do the work), so each batch is
its own transaction on the caller's thread. On DuckDB, whose writes are serialised anyway,
concurrent batches are committed together by one writer thread ("group commit"): each batch
still succeeds or fails alone — if any batch of a group fails, the group is rolled back and its
batches are retried one transaction each — but the fixed cost of a transaction and of each
statement is shared when many clients post at once.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from server.domain.records import BatchWrite, WriteResult
from server.storage.db import Database
from server.storage.writing.ingest import write_batches

log = logging.getLogger("mismatch_monitor.ingest")

MAX_GROUP = 16
MAX_GROUP_VALUES = 1 << 16
"""A group stops growing at this many metric values: grouping pays for small batches (a
transaction's fixed cost shared), while large ones gain nothing and would hold their values,
columns and the database's write of all of them at once. A larger batch commits alone."""


class Committer(Protocol):
    def commit(self, batch: BatchWrite) -> WriteResult:
        """Write one batch in a transaction of its own (or of a group that commits whole);
        raises what writing it raised."""
        ...

    def close(self) -> None:
        """Write what is queued, then stop."""
        ...


def committer(db: Database) -> Committer:
    """The committer for `db`'s database."""
    return GroupCommit(db) if db.is_duckdb else OneByOne(db)


class OneByOne:
    """One transaction per batch, on the caller's thread."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def commit(self, batch: BatchWrite) -> WriteResult:
        return _write_one(self._db, batch)

    def close(self) -> None:
        """Nothing queued, nothing to stop."""


@dataclass(frozen=True)
class _Job:
    batch: BatchWrite
    future: Future[WriteResult]
    values: int = 0


_STOP: _Job = None  # type: ignore[assignment]  # sentinel that ends the writer thread


class GroupCommit:
    """Batches from every caller, committed by one writer thread up to `MAX_GROUP` at a time."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()

    def commit(self, batch: BatchWrite) -> WriteResult:
        job = _Job(batch, Future(), sum(len(r.metrics) for r in batch.records))
        self._ensure_writer()
        self._jobs.put(job)
        return job.future.result()

    def close(self) -> None:
        """Stop the writer thread after the batches already queued."""
        writer = self._writer
        if writer is not None and writer.is_alive():
            self._jobs.put(_STOP)
            writer.join(timeout=30)

    def _ensure_writer(self) -> None:
        if self._writer is not None and self._writer.is_alive():
            return
        with self._writer_lock:
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(
                    target=self._writer_loop, name="mismatch-ingest-writer", daemon=True
                )
                self._writer.start()

    def _writer_loop(self) -> None:
        held: _Job | None = None  # taken from the queue, but too large for the group before
        stop = False
        while not stop:
            # a call per group: nothing of a committed group outlives it while the queue is idle
            held, stop = self._write_group(held)

    def _write_group(self, held: _Job | None) -> tuple[_Job | None, bool]:
        """Commit the next group (`held` first, if any); return the job that did not fit in
        it, and whether the writer is to stop."""
        first = held if held is not None else self._jobs.get()
        if first is _STOP:
            return None, True
        group = [first]
        values = first.values
        while len(group) < MAX_GROUP:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is _STOP:
                self._commit(group)
                return None, True
            if values + job.values > MAX_GROUP_VALUES:
                self._commit(group)
                return job, False  # the first of the next group
            group.append(job)
            values += job.values
        self._commit(group)
        return None, False

    def _commit(self, group: list[_Job]) -> None:
        try:
            self._commit_group(group)
        except BaseException as exc:  # never let the writer die with callers waiting
            for job in group:
                if not job.future.done():
                    job.future.set_exception(exc)

    def _commit_group(self, group: list[_Job]) -> None:
        outcomes = commit_together(self._db, [job.batch for job in group])
        for job, outcome in zip(group, outcomes, strict=True):
            if isinstance(outcome, Exception):
                job.future.set_exception(outcome)
            else:
                job.future.set_result(outcome)


def commit_together(db: Database, batches: Sequence[BatchWrite]) -> list[WriteResult | Exception]:
    """Commit `batches` in one transaction; if that fails, each in a transaction of its own.
    What each batch wrote, or the error it alone raised: one bad batch never fails the rest."""
    if len(batches) > 1:
        try:
            with db.write() as conn:
                return list(write_batches(conn, db, list(batches)))
        except Exception:
            log.debug("group of %d failed; retrying its batches one by one", len(batches))
    outcomes: list[WriteResult | Exception] = []
    for batch in batches:
        try:
            outcomes.append(_write_one(db, batch))
        except Exception as exc:
            outcomes.append(exc)
    return outcomes


def _write_one(db: Database, batch: BatchWrite) -> WriteResult:
    with db.write() as conn:
        return write_batches(conn, db, [batch])[0]
