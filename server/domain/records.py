"""What a batch writes and what writing it stored: the types between ingest and storage.

The API validates a batch against its schemas and maps it onto these; the ingest service and
storage take only these.
They are frozen: a batch is a fact once it arrived. Sequences stay whatever the caller built
(lists from the parser): copying thousands of values into tuples would cost more than it guards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from server.domain.names import DEFAULT_PROJECT

RecordKey = tuple[int, str, str, int]
"""(run pk, source, actor, step): the identity of one step record in storage."""


@dataclass(frozen=True, slots=True)
class BucketTable:
    """Per-probability-bucket sums of one record (METRICS.md, "Low-probability buckets").

    Sums, not means, so tables from several actors and steps add up exactly."""

    basis: str
    edges: Sequence[float]
    tokens: Sequence[float]
    sum_d: Sequence[float]
    sum_abs_d: Sequence[float]
    sum_k3: Sequence[float]
    sum_reverse_k3: Sequence[float]
    oob: Sequence[float]


@dataclass(frozen=True, slots=True)
class Exemplar:
    """One token of a step kept as evidence (a `top` or a `uniform` one): its logprobs on both
    sides and where it sits. d = trainer_logprob - rollout_logprob."""

    kind: str
    seq: int
    pos: int
    rollout_logprob: float
    trainer_logprob: float
    token_id: int | None = None
    token: str | None = None
    context: str | None = None


@dataclass(frozen=True, slots=True)
class Record:
    """One step's summary from one actor. `time` None means "when it arrived"."""

    run_id: str
    step: int
    source: str
    actor: str
    time: float | None
    gpu: str | None
    weight_version: int | None
    metrics: Mapping[str, float]
    buckets: Sequence[BucketTable] = ()
    exemplars: Sequence[Exemplar] = ()


@dataclass(frozen=True, slots=True)
class RunUpsert:
    """Create or update a run. None leaves a stored field alone; `config` merges by top-level
    key (so a rollout actor can add `engine` without erasing the trainer's keys)."""

    id: str
    name: str | None = None
    project: str | None = None
    tags: Sequence[str] | None = None
    labels: Mapping[str, str] | None = None
    config: Mapping[str, Any] | None = None
    status: str | None = None
    kind: str | None = None


@dataclass(frozen=True, slots=True)
class Annotation:
    """A free-text event on a run (a warning, a weight update). `id` makes a re-send harmless."""

    run_id: str
    text: str
    id: str | None = None
    step: int | None = None
    time: float | None = None
    kind: str = "note"
    source: str | None = None
    actor: str | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    """One client batch as it arrived: what the ingest service takes. Which project it may write
    is the caller's right, not the batch's: the service adds it (`BatchWrite`). `project` is the
    project the batch says its runs belong to (ingest format 2 sends it with every batch), so a
    run id used in several projects is never a guess."""

    run: RunUpsert | None
    records: Sequence[Record]
    annotations: Sequence[Annotation] = ()
    project: str | None = None


@dataclass(frozen=True, slots=True)
class BatchWrite:
    """One client batch, as storage takes it.

    `project` constrains the batch: every run it names must belong to that project (None: any
    project). `default_project` is where a run created without one lands."""

    run: RunUpsert | None
    records: Sequence[Record]
    annotations: Sequence[Annotation] = ()
    default_project: str = DEFAULT_PROJECT
    project: str | None = None


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """The values a batch newly stored for one step of one actor: what alarms evaluate."""

    run_id: str
    project: str
    labels: Mapping[str, str]
    source: str
    actor: str
    step: int
    time: float
    gpu: str | None
    weight_version: int | None
    metrics: Mapping[str, float]
    joins_stored: bool = False
    """The step was stored before this batch, which adds values to it: values of that step
    that an evaluation after a restart has not seen may be stored already."""


@dataclass(slots=True)
class WriteResult:
    """What one batch changed. Mutable: storage fills it in as it writes."""

    accepted: int = 0
    duplicates: int = 0
    annotations: int = 0
    values: int = 0
    stored: list[StoredRecord] = field(default_factory=list)
    new_projects: list[str] = field(default_factory=list)
    notify: bool = True  # whether alerts this batch opens are sent (False: an import's past)
    alerts_opened: int = 0  # filled in by the alarm listener
