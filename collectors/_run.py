"""The trainer-side handle: `collectors.init(...)` → `Run`.

Every public method returns quickly and never raises into the host: metric math runs on the
caller's thread (tensors never leave it), the upload on a background thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collectors._env import default_actor, host_info
from collectors._exit import closes_at_exit
from collectors._metric_map import resolve
from collectors._naming import Naming
from collectors._say import say
from collectors._spool import Spool
from collectors._transport import HttpTransport, Transport, Worker
from collectors._values import spool_dir_default, step_inputs, to_float, wire, wire_exemplar

log = logging.getLogger("mismatch_monitor.collectors")

DEFAULT_URL = "http://127.0.0.1:8765"


class Run:
    """One run as seen by one process. Use `collectors.init` to make one."""

    def __init__(
        self,
        *,
        url: str,
        token: str | None,
        run_id: str,
        run_name: str | None,
        project: str,
        labels: Mapping[str, str] | None,
        tags: list[str] | None,
        config: Mapping[str, Any] | None,
        actor: str | None,
        spool_dir: str | Path | None,
        flush_interval: float,
        max_batch_records: int,
        queue_size: int,
        spool_max_bytes: int,
        timeout: float,
        max_backoff: float = 30.0,
        transport: Transport | None = None,
        kind: str | None = None,
        metric_map: Mapping[str, str] | None = None,
    ) -> None:
        self.id = run_id
        self.kind = kind
        self.url = url
        self.project = project
        self.actor = actor or default_actor("trainer")
        self._name = run_name
        self._labels = dict(labels or {})
        self._tags = list(tags or [])
        self._config: dict[str, Any] = dict(config or {})
        self._config.setdefault("host", host_info())
        self._lock = threading.Lock()
        self._gpu = (
            self._config["host"].get("gpu", "cpu")
            if isinstance(self._config["host"], dict)
            else "cpu"
        )
        self._warned: set[str] = set()
        self._ended: str | None = None  # "finished" or "failed" once the run said it ended
        self._naming = Naming(metric_map or {}, self.update_config, self._warn_once)
        self._config.update(self._naming.config())
        self.spool = Spool(
            spool_dir or spool_dir_default(), run_id, max_bytes=spool_max_bytes, project=project
        )
        self._worker = Worker(
            transport or HttpTransport(url, token, timeout=timeout),
            self.spool,
            run=self._run_upsert(),
            queue_size=queue_size,
            max_batch_records=max_batch_records,
            flush_interval=flush_interval,
            max_backoff=max_backoff,
        )
        closes_at_exit(self)

    # -- logging ---------------------------------------------------------------------------
    def log_step(
        self,
        step: int,
        rollout_logprobs: Any = None,
        trainer_logprobs: Any = None,
        mask: Any = None,
        *,
        weight_version: int | None = None,
        metrics: Mapping[str, Any] | None = None,
        time: float | None = None,
        framework: str | None = None,
        exemplars: int = 0,
        token_ids: Any = None,
        tokenizer: Any = None,
        **metric_kwargs: Any,
    ) -> Any:
        """Compute the mismatch metrics of one step and enqueue them; returns the StepSummary
        (None when there was nothing to compute or the computation failed). `metrics` are
        logged beside them, mapped from `framework`'s names as `log_metrics` does.

        `exemplars=K` (opt-in, at most 512) also sends the K tokens with the largest |d| and a
        uniform sample of K; with `token_ids` (laid out like the logprobs) each carries its
        token id, and with a `tokenizer` (anything with `decode(list[int])`) its text and a
        short context, decoded for those 2K tokens only."""
        summary = None
        values: dict[str, Any] = {}
        buckets = None
        chosen = None
        rollout_logprobs, metrics, problem = step_inputs(
            step, rollout_logprobs, trainer_logprobs, metrics
        )
        if problem:
            self._warn_once("one_side", problem)
            self._worker.dropped["one_side"] += 1
        if rollout_logprobs is not None and trainer_logprobs is not None:
            try:
                from collectors._metrics import compute_step_metrics

                summary = compute_step_metrics(
                    rollout_logprobs,
                    trainer_logprobs,
                    mask,
                    exemplars=exemplars,
                    token_ids=token_ids,
                    **metric_kwargs,
                )
                values.update(summary.metrics)
                buckets = summary.buckets
                chosen = self._decode(summary.exemplars, token_ids, tokenizer, metric_kwargs)
            except Exception as exc:
                self._warn_once("compute", f"could not compute step metrics: {exc!r}")
                self._worker.dropped["compute_error"] += 1
        if metrics:
            values.update(metrics)
        if not values and not buckets and summary is None and not problem:
            self._warn_once(
                "empty_step",
                f"log_step(step={step}) was given nothing to store: pass rollout and trainer "
                "logprobs, or metrics={...}",
            )
        if values or buckets:
            self.log_metrics(
                step,
                values,
                weight_version=weight_version,
                time=time,
                buckets=buckets,
                framework=framework,
                exemplars=chosen,
            )
        return summary

    def _decode(
        self, chosen: list[dict[str, Any]], token_ids: Any, tokenizer: Any, kw: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Exemplars with token text where a tokenizer is given; a decoding failure keeps the
        ids and numbers (the text is a convenience, the numbers are the data)."""
        if not chosen or tokenizer is None:
            return chosen
        from collectors._exemplars import decode

        try:
            return decode([dict(e) for e in chosen], token_ids, tokenizer, kw.get("seq_lens"))
        except Exception as exc:
            self._warn_once("decode", f"could not decode exemplar tokens: {exc!r}")
            return chosen

    def log_metrics(
        self,
        step: int,
        metrics: Mapping[str, Any],
        *,
        source: str = "trainer",
        actor: str | None = None,
        weight_version: int | None = None,
        time: float | None = None,
        gpu: str | None = None,
        buckets: list[dict[str, Any]] | None = None,
        framework: str | None = None,
        exemplars: list[dict[str, Any]] | None = None,
    ) -> bool:
        """Enqueue one record; False when it was dropped. Never blocks, never raises.

        `framework` ("verl", "trl", "nemo-rl", "openrlhf", "slime", "ms-swift") names whose
        metric names `metrics` uses: they are mapped onto ours (`collectors._adapters`), a value
        whose formula differs from ours is kept apart as `<name>@<framework>`, names we do not
        know are kept as they are, and the run's config records the framework and its version
        once. An unknown framework is warned about once and its metrics are logged unmapped.

        `exemplars` are token exemplars in the wire shape (see collectors._exemplars), passed
        through with their logprobs made strict JSON."""
        try:
            if self._ended is not None:
                self._resume()
            if framework is not None or self._naming.metric_map:
                metrics = self._naming(framework, metrics)
            record: dict[str, Any] = {
                "run_id": self.id,
                "step": int(step),
                "source": source,
                "actor": actor or (self.actor if source == "trainer" else default_actor(source)),
                "time": _now() if time is None else float(time),
                "gpu": gpu or self._gpu,
                "metrics": {str(k): wire(to_float(v)) for k, v in metrics.items()},
            }
            if weight_version is not None:
                record["weight_version"] = int(weight_version)
            if buckets:
                record["buckets"] = buckets
            if exemplars:
                record["exemplars"] = [wire_exemplar(e) for e in exemplars]
            return self._worker.submit("record", record)
        except Exception as exc:
            self._warn_once("log_metrics", f"could not log metrics: {exc!r}")
            self._worker.dropped["invalid"] += 1
            return False

    def annotate(
        self,
        text: str,
        step: int | None = None,
        *,
        kind: str = "note",
        source: str | None = None,
        actor: str | None = None,
    ) -> bool:
        """A free-text event on the run (a warning, a weight update)."""
        note: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "run_id": self.id,
            "time": _now(),
            "kind": kind,
            "text": str(text)[:4000] or "-",
        }
        if step is not None:
            note["step"] = int(step)
        if source is not None:
            note["source"] = source
        if actor is not None:
            note["actor"] = actor
        return self._worker.submit("annotation", note)

    def update_config(self, config: Mapping[str, Any]) -> bool:
        """Merge keys into the run's config (by top-level key, on the server as here)."""
        with self._lock:  # described under the lock: a later update never loses to an earlier
            self._config.update(dict(config))
            self._worker.describe(self._run_upsert())
        return self._worker.submit("run", {})

    # -- lifecycle -------------------------------------------------------------------------
    def flush(self, timeout: float = 10.0) -> bool:
        """Deliver what was logged and replay the spool within `timeout`, trying the server at
        once whatever its back-off; True when nothing is left to send. What is left is logged
        once (a WARNING naming the spool's directory and the number of steps)."""
        return self._worker.flush(timeout)

    def finish(self, timeout: float = 10.0, *, failed: bool = False) -> bool:
        """Tell the server the run ended ("finished", or "failed"), then `flush`: never stalled,
        and running again once it logs again (an end-of-training hook's call)."""
        with self._lock:
            if self._ended != ("failed" if failed else "finished"):
                self._ended = "failed" if failed else "finished"
                self._worker.describe(self._run_upsert())
        self._worker.submit("run", {})
        return self.flush(timeout)

    def close(self, timeout: float = 10.0, *, failed: bool = False) -> bool:
        """`finish`, then stop the upload; the exit hook does this for every open run when
        the process ends normally (an uncaught exception leaves the run open, so the server's
        stalled rule tells that it died). True only when every step was stored."""
        with self._lock:
            if self._ended is None or failed:
                self._ended = "failed" if failed else "finished"
                self._worker.describe(self._run_upsert())
        self._worker.submit("run", {})
        return self._worker.close(timeout)

    def stats(self) -> dict[str, Any]:
        """Counters since start; `spooled_steps` is how many steps the spool still holds."""
        return self._worker.stats()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        failed = kind is not None and not issubclass(kind, KeyboardInterrupt)
        if failed and kind is not None:
            self.annotate(f"the run's block ended on {kind.__name__}", kind="exit")
        self.close(failed=failed)

    # -- internals -------------------------------------------------------------------------
    def _run_upsert(self) -> dict[str, Any]:
        """The run as the server should know it (the caller holds `_lock`, or no other thread
        knows the run yet)."""
        upsert: dict[str, Any] = {
            "id": self.id,
            "project": self.project,
            "config": dict(self._config),
        }
        if self._name:
            upsert["name"] = self._name
        if self._labels:
            upsert["labels"] = self._labels
        if self._tags:
            upsert["tags"] = self._tags
        if self.kind:
            upsert["kind"] = self.kind
        if self._ended is not None:
            upsert["status"] = self._ended
        return upsert

    def _resume(self) -> None:
        """A run that finished logs again: it is running again from the next batch on."""
        with self._lock:
            if self._ended is None:
                return
            self._ended = None
            upsert = self._run_upsert()
            upsert["status"] = "running"
            self._worker.describe(upsert)

    def _warn_once(self, key: str, message: str) -> None:
        """Once per `key`, where the person at the trainer sees it (`collectors._say`)."""
        if key not in self._warned:
            self._warned.add(key)
            say(log, message)


def _now() -> float:
    return time.time()


def init(
    url: str | None = None,
    token: str | None = None,
    *,
    run_id: str | None = None,
    run_name: str | None = None,
    project: str | None = None,
    labels: Mapping[str, str] | None = None,
    tags: list[str] | None = None,
    config: Mapping[str, Any] | None = None,
    actor: str | None = None,
    spool_dir: str | Path | None = None,
    flush_interval: float = 1.0,
    max_batch_records: int = 512,
    queue_size: int = 10_000,
    spool_max_bytes: int = 256 << 20,
    timeout: float = 5.0,
    max_backoff: float = 30.0,
    transport: Transport | None = None,
    kind: str | None = None,
    metric_map: Mapping[str, str] | None = None,
) -> Run:
    """Start reporting one run. Arguments fall back to MISMATCH_URL, MISMATCH_TOKEN,
    MISMATCH_RUN_ID, MISMATCH_PROJECT and MISMATCH_SPOOL_DIR. `max_backoff` caps the wait
    between retries while the server is away (seconds; a Retry-After above it waits this).
    `kind` names what the run is ("training", the server's default, or "parity" for a parity
    report). `metric_map` ({"training/vllm_kl": "k1_kl"}, else MISMATCH_METRIC_MAP) stores the
    values of names no framework table knows under canonical ones; a bad pair raises ValueError.
    """
    env = os.environ
    return Run(
        url=url or env.get("MISMATCH_URL") or DEFAULT_URL,
        token=token or env.get("MISMATCH_TOKEN") or None,
        run_id=run_id or env.get("MISMATCH_RUN_ID") or f"run-{uuid.uuid4().hex[:12]}",
        run_name=run_name,
        project=project or env.get("MISMATCH_PROJECT") or "default",
        labels=labels,
        tags=tags,
        config=config,
        actor=actor,
        spool_dir=spool_dir or env.get("MISMATCH_SPOOL_DIR") or None,
        flush_interval=flush_interval,
        max_batch_records=max_batch_records,
        queue_size=queue_size,
        spool_max_bytes=spool_max_bytes,
        timeout=timeout,
        max_backoff=max_backoff,
        transport=transport,
        kind=kind,
        metric_map=resolve(metric_map, env),
    )
