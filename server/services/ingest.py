"""The ingest service: check ownership, write one batch in one transaction, then tell the
listeners (alarms, metrics export) what was newly stored. A listener's failure never fails an
ingest that is already committed: it is logged.

On DuckDB, whose writes are serialised anyway, concurrent batches are committed together by one
writer thread ("group commit"): each batch still succeeds or fails alone — if any batch of a
group fails, the group is rolled back and its batches are retried one transaction each — but the
fixed cost of a transaction and of each statement is shared when many clients post at once.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol, cast

from sqlalchemy.engine import Connection

from server.auth import Principal
from server.domain.names import DEFAULT_PROJECT
from server.domain.records import (
    Annotation,
    BatchWrite,
    BucketTable,
    Exemplar,
    Record,
    RunUpsert,
    WriteResult,
)
from server.errors import Forbidden
from server.schemas.ingest import (
    AnnotationIn,
    BucketTableIn,
    ExemplarIn,
    IngestIn,
    IngestOut,
    IngestWire,
    RecordIn,
    RecordWire,
    RunIn,
    WireRefused,
    decode_wire,
)
from server.storage.db import Database
from server.storage.ingest import write_batches

log = logging.getLogger("mismatch_monitor.ingest")

MAX_GROUP = 16
_STOP: _Job = None  # type: ignore[assignment]  # sentinel that ends the writer thread


class IngestListener(Protocol):
    def on_ingested(self, result: WriteResult) -> None: ...


@dataclass(frozen=True)
class _Job:
    batch: BatchWrite
    future: Future[WriteResult]


class IngestService:
    def __init__(self, db: Database, *, listeners: list[IngestListener] | None = None) -> None:
        self._db = db
        self.listeners: list[IngestListener] = list(listeners or [])
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()

    def ingest(self, batch: IngestIn | IngestWire, principal: Principal) -> IngestOut:
        project: str | None = None
        if not principal.is_server_admin:
            if principal.scope not in ("ingest", "admin"):
                raise Forbidden(f"this token has scope {principal.scope!r}; ingest needs 'ingest'")
            assert principal.project is not None
            project = principal.project
            if batch.run is not None and batch.run.project not in (None, project):
                raise Forbidden(f"this token writes project {project!r}, not {batch.run.project!r}")
        job = _Job(to_batch_write(batch, project=project), Future())
        if self._db.is_duckdb:
            self._ensure_writer()
            self._jobs.put(job)
            result = job.future.result()
        else:
            result = self._write_one(job)
        for listener in self.listeners:
            try:
                listener.on_ingested(result)
            except Exception:
                log.exception("ingest listener %r failed", listener)
        return IngestOut(
            accepted=result.accepted, duplicates=result.duplicates, annotations=result.annotations
        )

    def _write_one(self, job: _Job) -> WriteResult:
        with self._db.write() as conn:
            return self._write(conn, [job])[0]

    def _write(self, conn: Connection, jobs: list[_Job]) -> list[WriteResult]:
        return write_batches(conn, self._db, [job.batch for job in jobs])

    def close(self) -> None:
        """Stop the writer thread after the batches already queued."""
        writer = self._writer
        if writer is not None and writer.is_alive():
            self._jobs.put(_STOP)
            writer.join(timeout=30)

    # -- group commit (DuckDB) --------------------------------------------------------------
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
        while True:
            first = self._jobs.get()
            if first is _STOP:
                return
            group = [first]
            stop = False
            while len(group) < MAX_GROUP:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is _STOP:
                    stop = True
                    break
                group.append(job)
            try:
                self._commit_group(group)
            except BaseException as exc:  # never let the writer die with callers waiting
                for job in group:
                    if not job.future.done():
                        job.future.set_exception(exc)
            if stop:
                return

    def _commit_group(self, group: list[_Job]) -> None:
        if len(group) > 1:
            try:
                with self._db.write() as conn:
                    results = self._write(conn, group)
            except Exception:
                log.debug("group of %d failed; retrying its batches one by one", len(group))
            else:
                for job, result in zip(group, results, strict=True):
                    job.future.set_result(result)
                return
        for job in group:
            try:
                job.future.set_result(self._write_one(job))
            except Exception as exc:
                job.future.set_exception(exc)


# -- the body onto domain types --------------------------------------------------------------
def parse_batch(body: bytes) -> IngestIn | IngestWire:
    """The batch in an ingest body: decoded by the wire decoder (compact, fast), or, for what it
    leaves to them, by the models, which raise pydantic's `ValidationError` for a bad batch."""
    try:
        return decode_wire(body)
    except WireRefused:
        return IngestIn.model_validate_json(body)


def to_batch_write(batch: IngestIn | IngestWire, *, project: str | None = None) -> BatchWrite:
    """The batch as storage takes it. `project`: the only project it may write (a token's),
    which is also where a run it creates lands; None for an admin or an open server."""
    if isinstance(batch, IngestWire):
        records = [_wire_record(i, r, batch) for i, r in enumerate(batch.records)]
    else:
        records = [_record(r) for r in batch.records]
    return BatchWrite(
        run=_run(batch.run) if batch.run is not None else None,
        records=records,
        annotations=[_annotation(a) for a in batch.annotations],
        default_project=project or DEFAULT_PROJECT,
        project=project,
    )


def _wire_record(index: int, rec: RecordWire, batch: IngestWire) -> Record:
    """A decoded record (checked and normalised by `decode_wire`: `time` and every metric value
    are floats by now) as storage takes it; its metrics dict is handed on, not copied."""
    exemplars = batch.exemplars.get(index)
    return Record(
        rec.run_id,
        rec.step,
        rec.source,
        rec.actor,
        cast("float | None", rec.time),
        rec.gpu,
        rec.weight_version,
        cast("dict[str, float]", rec.metrics),
        [_bucket_table(b) for b in batch.buckets.get(index, ())],
        [_exemplar(e) for e in exemplars] if exemplars else (),
    )


def _run(run: RunIn) -> RunUpsert:
    return RunUpsert(
        id=run.id,
        name=run.name,
        project=run.project,
        tags=run.tags,
        labels=run.labels,
        config=run.config,
        status=run.status,
        kind=run.kind,
    )


def _bucket_table(b: BucketTableIn) -> BucketTable:
    return BucketTable(
        b.basis, b.edges, b.tokens, b.sum_d, b.sum_abs_d, b.sum_k3, b.sum_reverse_k3, b.oob
    )


def _exemplar(e: ExemplarIn) -> Exemplar:
    return Exemplar(
        e.kind,
        e.seq,
        e.pos,
        e.rollout_logprob,
        e.trainer_logprob,
        e.token_id,
        e.token,
        e.context,
    )


def _record(rec: RecordIn) -> Record:
    buckets = [_bucket_table(b) for b in rec.buckets or ()]
    return Record(
        rec.run_id,
        rec.step,
        rec.source,
        rec.actor,
        rec.time,
        rec.gpu,
        rec.weight_version,
        rec.metrics,
        buckets,
        [_exemplar(e) for e in rec.exemplars] if rec.exemplars else (),
    )


def _annotation(a: AnnotationIn) -> Annotation:
    return Annotation(
        run_id=a.run_id,
        text=a.text,
        id=a.id,
        step=a.step,
        time=a.time,
        kind=a.kind,
        source=a.source,
        actor=a.actor,
    )
