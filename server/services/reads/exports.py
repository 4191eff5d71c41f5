"""The export service: what an export of runs' full-resolution values will read, checked before
a byte is sent, and its batches read one at a time.

An export is planned under the reader's scope (a run of a project the reader cannot see is as
unknown as a missing one), every filter is checked up front (an answer that has begun streaming
can no longer say what was wrong), and then its batches are read lazily, each on its own
connection, so a request holds one batch of values at a time whatever the runs hold.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from server.domain.reads.scope import ReadScope
from server.errors import NotFound, Rejected
from server.services.reads.lookup import find_all
from server.storage.db import Database
from server.storage.reading import exports

MAX_RUNS = 1000
MAX_METRICS = 1000
SCHEMA = exports.SCHEMA
T = TypeVar("T")


@dataclass(frozen=True)
class Export:
    """A planned export: its series, its reads, and the labels' dictionaries."""

    heads: list[exports.Head]
    reads: list[exports.Read]
    labels: exports.Dictionaries
    db: Database
    rows: int = exports.BATCH_ROWS

    @property
    def values(self) -> int:
        """Values its series hold: exactly the rows of an export of whole series, an upper
        bound with a step range."""
        return exports.count(self.heads)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The batches, the next one read while the caller writes out the one it holds."""
        return read_ahead(exports.batches(self.db.read, self.reads, self.labels, self.rows))


def read_ahead(batches: Iterator[T]) -> Iterator[T]:
    """`batches`, produced one ahead on a thread of their own: the database reads the next
    batch while the answer encodes and sends this one (both release the GIL), so an export
    costs about the longer of the two instead of their sum, holding at most two batches.
    Closing the iterator (a client gone) stops the producer after the batch in hand."""
    handed: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                handed.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for batch in batches:
                if not hand(("batch", batch)):
                    return
            hand(("done", None))
        except BaseException as exc:  # handed to the consumer, raised there
            hand(("error", exc))
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    producer = threading.Thread(target=produce, name="export-read-ahead", daemon=True)
    producer.start()
    try:
        while True:
            kind, value = handed.get()
            if kind == "done":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        producer.join()


class ExportReads:
    def __init__(self, db: Database, *, budget: int | None = None) -> None:
        """`budget`: values per read (default: the database's, `exports.READ_VALUES`); a
        batch handed on holds at most `exports.BATCH_ROWS` rows, and no more than a read."""
        self._db = db
        self.budget = budget or exports.READ_VALUES[db.dialect]
        self.rows = min(self.budget, exports.BATCH_ROWS)

    def plan(
        self,
        scope: ReadScope,
        run_ids: Sequence[str],
        *,
        metrics: Sequence[str] | None = None,
        source: str | None = None,
        step_min: int | None = None,
        step_max: int | None = None,
    ) -> Export:
        """An export of `run_ids` (in that order), of `metrics` (None: every metric), over
        [step_min, step_max]; refused with the field at fault before anything is read."""
        check(run_ids, metrics, source, step_min, step_max)
        with self._db.read() as conn:
            try:
                runs = find_all(conn, list(dict.fromkeys(run_ids)), scope.projects)
            except NotFound as exc:
                raise NotFound(f"runs: {exc.message}", detail={"field": "runs"}) from exc
            found = exports.heads(conn, runs, metrics=metrics, source=source)
        if metrics is not None:
            missing = sorted(set(metrics) - {h.metric for h in found})
            if missing:
                raise NotFound(
                    f"metrics: {', '.join(map(repr, missing))} in none of the runs asked"
                    + (f" from source {source!r}" if source else "")
                    + "; list a run's metrics with GET /api/v1/runs/{run_id}/metrics",
                    detail={"field": "metrics", "missing": missing},
                )
        reads = exports.plan_reads(found, step_min, step_max, self.budget)
        return Export(found, reads, exports.Dictionaries.of(found), self._db, self.rows)


def check(
    run_ids: Sequence[str],
    metrics: Sequence[str] | None,
    source: str | None,
    step_min: int | None,
    step_max: int | None,
) -> None:
    """Each filter of an export, refused in the words of the field at fault."""
    if not run_ids:
        raise Rejected("runs: give at least one run id", detail={"field": "runs"})
    if len(set(run_ids)) > MAX_RUNS:
        raise Rejected(
            f"runs: at most {MAX_RUNS} runs in one export; export them in several",
            detail={"field": "runs"},
        )
    if metrics is not None and not metrics:
        raise Rejected(
            "metrics: give at least one metric name, or leave it out for every metric",
            detail={"field": "metrics"},
        )
    if metrics is not None and len(set(metrics)) > MAX_METRICS:
        raise Rejected(f"metrics: at most {MAX_METRICS} names", detail={"field": "metrics"})
    if source is not None and source not in ("trainer", "rollout"):
        raise Rejected("source: trainer or rollout", detail={"field": "source"})
    for name, step in (("step_min", step_min), ("step_max", step_max)):
        if step is not None and not 0 <= step <= 2**53:
            raise Rejected(f"{name}: a step between 0 and 2**53", detail={"field": name})
    if step_min is not None and step_max is not None and step_min > step_max:
        raise Rejected(
            f"step_min ({step_min}) is greater than step_max ({step_max})",
            detail={"field": "step_min"},
        )
