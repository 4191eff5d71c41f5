"""Read-models of runs: a run as the runs list shows it, as its page shows it, its config, its
metrics, its token exemplars. The API's `…Out` models are derived from these
(`server.schemas.derive`): a field added here is on the wire."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from server.domain.names import ExemplarKind, RunKind, RunStatus, Source

JsonObject = Mapping[str, object]
"""A document a client sent (a run's config): JSON, read by key."""


@dataclass(frozen=True)
class Headline:
    """A run's headline mismatch signal (`server.domain.signals`) and its latest value."""

    metric: str
    label: str
    meaning: str
    value: float


@dataclass(frozen=True)
class RunSummary:
    """A run as the runs list shows it: from its row and its series heads, no value read."""

    id: str
    name: str
    project: str
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    status: RunStatus
    created_at: float
    last_seen: float | None
    last_step: int | None
    gpus: tuple[str, ...]
    latest: Mapping[str, float]
    headline: Headline | None
    firing_alerts: int
    raw_dropped: bool
    kind: RunKind
    ended_at: float | None
    """When a finished or failed run said it ended; None while it runs."""


@dataclass(frozen=True)
class RunPage:
    """One page of the runs list; `next_cursor` (when there is more) continues it."""

    runs: tuple[RunSummary, ...]
    total: int
    next_cursor: str | None


@dataclass(frozen=True)
class Actor:
    source: str
    actor: str
    gpu: str | None
    first_step: int
    last_step: int
    steps: int


@dataclass(frozen=True)
class GpuSegment:
    """A stretch of a run on one GPU type (several joined by '+' where a step's actors differ)."""

    source: str
    gpu: str
    first_step: int
    last_step: int


@dataclass(frozen=True)
class Annotation:
    id: str
    run_id: str
    step: int | None
    time: float
    kind: str
    source: str | None
    actor: str | None
    text: str


@dataclass(frozen=True)
class RunDetail(RunSummary):
    """A run with its config, actors, annotations and GPU segments (per source, in step order)."""

    config: JsonObject
    actors: tuple[Actor, ...]
    annotations: tuple[Annotation, ...]
    gpu_segments: tuple[GpuSegment, ...]


@dataclass(frozen=True)
class RunConfig:
    """A run's name and config only: what a comparison of configs needs."""

    id: str
    name: str
    config: JsonObject


@dataclass(frozen=True)
class MetricInfo:
    """A metric a run logs from one source: its actors and how many points they logged."""

    name: str
    source: str
    actors: tuple[str, ...]
    points: int


@dataclass(frozen=True)
class Exemplar:
    """One token exemplar of a step; d = trainer_logprob - rollout_logprob (NaN/±Inf are data)."""

    step: int
    source: Source
    actor: str
    kind: ExemplarKind
    seq: int
    pos: int
    rollout_logprob: float
    trainer_logprob: float
    token_id: int | None
    token: str | None
    context: str | None
