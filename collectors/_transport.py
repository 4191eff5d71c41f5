"""Getting batches to the server without ever hurting the host process.

- `HttpTransport` (in `_http`) posts one gzip'd JSON batch and classifies the answer.
- `Worker` owns a bounded queue and a daemon thread: `submit` never blocks (a full queue spills to
  the spool, and only a full spool drops, counted by reason); the thread batches by size and time,
  retries with exponential backoff and jitter (honouring `Retry-After`), spools what it cannot
  deliver and replays the spool when the server answers again. It survives fork (the child gets a
  fresh queue, lock and thread) and is flushed at exit within a bounded time.
- `flush`, `close` and the exit hook drain: they try the server at once, whatever back-off it
  was in, and replay the spool within their timeout; what is still spooled then is logged once
  with the spool's directory and count (on a cluster that disk goes away with the node).
- A server that does not speak this client's ingest format (a 400 naming both versions) is a
  permanent answer for this process: the worker logs it once, stops sending, and keeps every
  batch in the spool (counted as `incompatible`), to be replayed by an upgraded client or server.
- A batch refused for good (another 4xx) is a dead letter (`_dead`); every batch names its
  run's project, so a run id used in several projects is never ambiguous.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from collectors._backoff import Backoff
from collectors._dead import DeadLetters, say_spool_full
from collectors._fork import reset_in_forked_children
from collectors._http import Answer, HttpTransport, Transport, classify
from collectors._spool import LeftBehind, Spool

__all__ = ["Answer", "HttpTransport", "Transport", "Worker", "classify"]

log = logging.getLogger("mismatch_monitor.collectors")


class Worker:
    """A bounded queue drained by one daemon thread into batches."""

    _pid: int
    _queue: queue.Queue[tuple[str, dict[str, Any]]]
    _cond: threading.Condition
    _outstanding: int
    _flush_requested: bool
    _stop: threading.Event
    _thread: threading.Thread | None
    _thread_lock: threading.Lock
    _retry: Backoff
    incompatible: str

    def __init__(
        self,
        transport: Transport,
        spool: Spool,
        *,
        run: Mapping[str, Any],
        queue_size: int = 10_000,
        max_batch_records: int = 512,
        flush_interval: float = 1.0,
        max_backoff: float = 30.0,
        attempts_before_spool: int = 3,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        """`sleep` replaces the wait between retries (tests: see `Backoff`)."""
        self.transport = transport
        self.spool = spool
        self._run: dict[str, Any] = dict(run)
        self.queue_size = queue_size
        self.max_batch_records = max_batch_records
        self.flush_interval = flush_interval
        self.max_backoff = max_backoff
        self.attempts_before_spool = attempts_before_spool
        self._sleep = sleep
        self.counters: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self._run_pending = True
        self._closed = False
        self.incompatible = ""  # the server's message once it refused our ingest format
        self._left = LeftBehind(spool)
        self.dead = DeadLetters(spool, str(run.get("id", "")))
        self._reset_after_fork()
        reset_in_forked_children(self._reset_after_fork)

    # -- the host's side: never blocks, never raises -------------------------------------------
    def submit(self, kind: str, item: dict[str, Any]) -> bool:
        try:
            self._check_fork()
            self._ensure_thread()
            if self._closed:
                return self._spill([(kind, item)])
            try:
                self._queue.put_nowait((kind, item))
            except queue.Full:
                return self._spill([(kind, item)])
            with self._cond:
                self._outstanding += 1
            self.counters["queued"] += 1
            return True
        except Exception:  # the host's step must go on whatever happens here
            self.dropped["internal_error"] += 1
            log.debug("submit failed", exc_info=True)
            return False

    def describe(self, run: Mapping[str, Any]) -> None:
        """The run as the server should know it from the next batch on, pushed by the host."""
        self._run = dict(run)
        self._run_pending = True

    def _run_upsert(self) -> dict[str, Any]:
        return dict(self._run)  # a copy: a batch may be spooled while the next one is built

    def flush(self, timeout: float = 10.0) -> bool:
        """Deliver what was submitted and replay the spool within `timeout`, at once whatever
        the back-off. True when all is stored (a spool kept for a server of another ingest
        format waits for an upgrade); what is left is said once, and dead letters count."""
        try:
            drained = self._drain(timeout)
            if drained:
                self._left.clear()
            else:
                self._left.report(final=False)
            return drained and not self.dead.held()
        except Exception:
            log.debug("flush failed", exc_info=True)
            return False

    def close(self, timeout: float = 10.0) -> bool:
        """Drain as `flush` does, then stop; the queue's rest is spooled, the spool logged."""
        try:
            flushed = self._drain(timeout)
            self._closed = True
            self._stop.set()
            self._retry.interrupt()
            with self._cond:
                self._cond.notify_all()
            leftovers: list[tuple[str, dict[str, Any]]] = []
            while True:
                try:
                    leftovers.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if leftovers:
                self._spill(leftovers)
                with self._cond:
                    self._outstanding = max(0, self._outstanding - len(leftovers))
            thread = self._thread
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=max(0.1, min(timeout, 2.0)))
            self._left.report(final=True)
            return flushed and not leftovers and not self.dead.held()
        except Exception:
            log.debug("close failed", exc_info=True)
            return False

    def stats(self) -> dict[str, Any]:
        """Counters since start; `spooled_steps`: what the spool holds now (`Spool.steps`)."""
        return {
            "queued": self.counters["queued"],
            "sent": self.counters["sent"],
            "batches": self.counters["batches"],
            "spooled": self.counters["spooled"],
            "replayed": self.counters["replayed"],
            "rejected": self.counters["rejected"],
            "dead_letter_steps": self.dead.held(),
            "dead_letter_path": str(self.dead.path),
            "retries": self.counters["retries"],
            "incompatible": self.counters["incompatible"],
            "dropped": dict(self.dropped),
            "pending": self._outstanding,
            "spool_bytes": self.spool.size(),
            "spooled_steps": self.spool.steps(),
            "spool_path": str(self.spool.directory),
        }

    # -- draining --------------------------------------------------------------------------
    def _drain(self, timeout: float) -> bool:
        """Wake the thread out of any back-off; wait for queue and spool to empty, or timeout."""
        self._check_fork()
        deadline = time.monotonic() + timeout
        self._ensure_thread()
        self._retry.drain(deadline)
        with self._cond:
            self._flush_requested = True
            self._cond.notify_all()
        try:
            while not self._drained():
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread_alive():
                    return False
                with self._cond:
                    self._cond.wait(min(left, 0.05))
            return True
        finally:
            self._retry.undrain(deadline)

    def _drained(self) -> bool:
        return self._outstanding == 0 and (bool(self.incompatible) or not self.spool.held())

    # -- fork safety -----------------------------------------------------------------------
    def _reset_after_fork(self) -> None:
        self._pid = os.getpid()
        self._queue = queue.Queue(self.queue_size)
        self._cond = threading.Condition()
        self._outstanding = 0
        self._flush_requested = False
        self._stop = threading.Event()
        self._thread = None
        self._thread_lock = threading.Lock()
        self._retry = Backoff(self.max_backoff, self._sleep)
        self._run_pending = True

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:
            self._reset_after_fork()

    def _thread_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _ensure_thread(self) -> None:
        if self._thread_alive() or self._closed:
            return
        with self._thread_lock:
            if not self._thread_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="mismatch-monitor-worker", daemon=True
                )
                self._thread.start()

    # -- the thread -----------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            items: list[tuple[str, dict[str, Any]]] = []
            try:
                items = self._collect()
                if items:
                    self._deliver(items)
                elif self._may_replay():
                    self._replay()
            except Exception:
                log.debug("worker loop error", exc_info=True)
                if items:  # their fate is unknown: keep them (the server ignores a repeat)
                    self._spill(items)
            finally:
                with self._cond:
                    self._outstanding = max(0, self._outstanding - len(items))
                    self._cond.notify_all()

    def _collect(self) -> list[tuple[str, dict[str, Any]]]:
        items: list[tuple[str, dict[str, Any]]] = []
        deadline = time.monotonic() + self.flush_interval
        while len(items) < self.max_batch_records:
            left = deadline - time.monotonic()
            if self._queue.empty() and (
                self._flush_requested or (self._retry.draining() and self._may_replay())
            ):
                break
            if left <= 0:
                break
            try:
                items.append(self._queue.get(timeout=min(left, 0.05)))
            except queue.Empty:
                if self._stop.is_set():
                    break
        if self._queue.empty():
            self._flush_requested = False
        return items

    def _may_replay(self) -> bool:
        return not self.incompatible and self._retry.online() and self.spool.pending()

    def _batch(self, items: list[tuple[str, dict[str, Any]]], *, with_run: bool) -> dict[str, Any]:
        batch: dict[str, Any] = {
            "batch_id": uuid.uuid4().hex,
            "project": self._run.get("project"),
            "records": [item for kind, item in items if kind == "record"],
            "annotations": [item for kind, item in items if kind == "annotation"],
        }
        if with_run or any(kind == "run" for kind, _ in items):
            batch["run"] = self._run_upsert()
        return batch

    def _deliver(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        if self.incompatible:
            self._to_spool(self._batch(items, with_run=True), incompatible=True)
            return
        if self._retry.online() and self.spool.pending():
            self._replay()
        batch = self._batch(items, with_run=self._run_pending)
        if not self._retry.online():
            self._to_spool(batch)
            return
        self._send_with_retries(batch, spool_on_failure=True)

    def _send(self, batch: dict[str, Any]) -> Answer:
        """The answer; a transport that raises (a torn status line) means "try again"."""
        try:
            return self.transport.send(batch)
        except Exception as exc:
            return Answer("retry", None, None, repr(exc))

    def _send_with_retries(self, batch: dict[str, Any], *, spool_on_failure: bool) -> bool:
        for attempt in range(self.attempts_before_spool):
            answer = self._send(batch)
            if answer.outcome == "ok":
                self.counters["sent"] += len(batch["records"])
                self.counters["batches"] += 1
                if "run" in batch:
                    self._run_pending = False
                self._retry.succeeded()
                return True
            if answer.outcome == "unknown_run" and "run" not in batch:
                batch["run"] = self._run_upsert()
                continue
            if answer.outcome == "too_large" and len(batch["records"]) > 1:
                half = len(batch["records"]) // 2
                first = {**batch, "batch_id": uuid.uuid4().hex, "records": batch["records"][:half]}
                second = {
                    **batch,
                    "batch_id": uuid.uuid4().hex,
                    "records": batch["records"][half:],
                    "annotations": [],
                }
                ok1 = self._send_with_retries(first, spool_on_failure=spool_on_failure)
                ok2 = self._send_with_retries(second, spool_on_failure=spool_on_failure)
                return ok1 and ok2
            if answer.outcome == "incompatible":
                if not self.incompatible:
                    self.incompatible = answer.detail or f"HTTP {answer.status}"
                    log.error(
                        "the monitor server does not speak this client's ingest format; "
                        "nothing more is sent, batches are kept in the spool at %s: %s",
                        self.spool.directory,
                        self.incompatible,
                    )
                if spool_on_failure:
                    self._to_spool(batch, incompatible=True)
                return False
            if answer.outcome in ("reject", "too_large", "unknown_run"):
                # permanent: retrying would not change the answer; kept until the cause is fixed
                self.counters["rejected"] += len(batch["records"])
                batch.setdefault("run", self._run_upsert())  # a replay may meet a new server
                if not self.dead.keep(batch, answer.status, answer.detail or answer.outcome):
                    self.dropped["dead_letter_failed"] += len(batch["records"])
                return True
            self.counters["retries"] += 1
            if self._stop.is_set():
                break  # closing: what is not delivered now goes to the spool
            if attempt + 1 < self.attempts_before_spool:
                self._retry.pause(self._retry.next_wait(answer.retry_after), self._stop)
        self._retry.went_away()
        if spool_on_failure:
            self._to_spool(batch)
        return False

    def _to_spool(self, batch: dict[str, Any], *, incompatible: bool = False) -> None:
        batch["run"] = self._run_upsert()  # a replay may meet a server that never saw the run
        if self.spool.append(batch):
            self.counters["spooled"] += len(batch["records"])
            if incompatible:
                self.counters["incompatible"] += len(batch["records"])
        else:
            self._spool_full(len(batch["records"]) + len(batch["annotations"]))

    def _spill(self, items: list[tuple[str, dict[str, Any]]]) -> bool:
        """Straight to the spool (queue full, or closed): on the caller's thread."""
        batch = self._batch(items, with_run=True)
        if self.spool.append(batch):
            self.counters["spooled"] += len(batch["records"])
            return True
        self._spool_full(len(items))
        return False

    def _spool_full(self, lost: int) -> None:  # neither sent nor kept: said once, counted
        if not self.dropped["spool_full"]:
            say_spool_full(self.spool.directory, self.spool.max_bytes)
        self.dropped["spool_full"] += lost

    def _replay(self) -> None:
        for claimed, batches in self.spool.claim():
            delivered = 0
            try:
                for batch in batches:
                    if self._stop.is_set():
                        break  # closing: the file goes back, for the next process or a replay
                    if not self._send_with_retries(batch, spool_on_failure=False):
                        break
                    delivered += 1
                    self.counters["replayed"] += len(batch.get("records", []))
            finally:  # whatever happened, the file is either done or given back
                if delivered == len(batches):
                    self.spool.done(claimed)
                else:
                    self.spool.release(claimed, batches[delivered:])
            if delivered < len(batches):
                return
