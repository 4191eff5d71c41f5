"""What a parity check found: per-phase metrics, buckets and exemplars, the engine against
itself across batch sizes, and the effective engine configuration — plain data, shaped for the
terminal, `--json` and the server's wire contract (a run of kind "parity": one record per
phase, the config under `engine`, `trainer`, `parity`; the engine-against-itself figures as
metrics of the step-0 record, `self_<name>_b<batch size>`, which any server stores)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Phase:
    """One sampling pass compared with the trainer: step 0 is plain sampling, later steps come
    after a weight-update variant (named by `name`)."""

    step: int
    name: str
    metrics: dict[str, float]
    buckets: list[dict[str, Any]] = field(default_factory=list)
    exemplars: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class SelfBatch:
    """The check's requests sent `batch_size` per call, compared with the same requests sent
    one per call (the reference, `batch_size` 1, compared with itself). `engine_batch` is the
    most sequences the engine ran in one step, read from its scheduler — what proves the
    batch was one (None where the scheduler runs in another process)."""

    batch_size: int
    engine_batch: int | None
    metrics: dict[str, float]


@dataclass(frozen=True)
class ParityReport:
    """A parity check's result. `engine` is the configuration read back from the running
    engine (what it really did, e.g. async scheduling silently off on CPU), not the request."""

    phases: tuple[Phase, ...]
    engine: dict[str, Any]
    trainer: dict[str, Any]
    parity: dict[str, Any]
    # the engine against itself: the reference (batch of 1) first; empty when not run
    self_batches: tuple[SelfBatch, ...] = ()

    def config(self) -> dict[str, Any]:
        """The run config of the stored report (the wire contract's top-level keys)."""
        return {"engine": self.engine, "trainer": self.trainer, "parity": self.parity}

    def labels(self) -> dict[str, str]:
        """Labels that find and group reports: engine version, GPU type, the options."""
        e = self.engine
        pairs = {
            "vllm": e.get("version"),
            "gpu": e.get("gpu"),
            "logprobs_mode": e.get("logprobs_mode"),
            "dtype": e.get("dtype"),
            "head_dtype": e.get("head_dtype"),
            "trainer_dtype": self.trainer.get("dtype"),
            "prefix_caching": e.get("enable_prefix_caching"),
            "weight_update": self.parity.get("weight_update"),
        }
        return {k: _label(v) for k, v in pairs.items() if v is not None}

    def self_metrics(self) -> dict[str, float]:
        """The engine-against-itself figures as flat metrics of the step-0 record:
        `self_<name>_b<batch size>`, and `self_engine_batch_b<batch size>` where observed."""
        out: dict[str, float] = {}
        for b in self.self_batches:
            if b.engine_batch is not None:
                out[f"self_engine_batch_b{b.batch_size}"] = float(b.engine_batch)
            if b.batch_size != 1:
                out.update({f"self_{k}_b{b.batch_size}": v for k, v in b.metrics.items()})
        return out

    def to_json(self) -> dict[str, Any]:
        """The whole report as strict JSON (NaN/Inf as the strings "nan", "inf", "-inf")."""
        return {
            "config": self.config(),
            "labels": self.labels(),
            "phases": [
                {
                    "step": p.step,
                    "name": p.name,
                    "metrics": {k: wire(v) for k, v in p.metrics.items()},
                    "buckets": [_strict_table(t) for t in p.buckets],
                    "exemplars": [
                        {
                            **ex,
                            "rollout_logprob": wire(ex["rollout_logprob"]),
                            "trainer_logprob": wire(ex["trainer_logprob"]),
                        }
                        for ex in p.exemplars
                    ],
                }
                for p in self.phases
            ],
            "self_check": [
                {
                    "batch_size": b.batch_size,
                    "engine_batch": b.engine_batch,
                    "metrics": {k: wire(v) for k, v in b.metrics.items()},
                }
                for b in self.self_batches
            ],
        }


def wire(value: float) -> float | str:
    value = float(value)
    return value if math.isfinite(value) else repr(value)


def _strict_table(table: dict[str, Any]) -> dict[str, Any]:
    """A bucket table with non-finite sums (a trainer logprob of -inf gives sum_d = -inf) as
    strings, like metric values."""
    return {
        k: [wire(x) for x in v] if isinstance(v, list) and k != "edges" else v
        for k, v in table.items()
    }


def _label(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
