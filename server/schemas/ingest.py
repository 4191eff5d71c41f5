"""The ingest contract (v1): what a collector sends in one batch.

The server's OpenAPI document, generated from these models, is the authority that the
collectors follow. NaN and ±Inf are data: they arrive as JSON tokens (`NaN`, `Infinity`,
`-Infinity`) or as the strings "nan", "inf", "-inf", and are stored as such.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from server.domain.names import (
    ID_PATTERN,
    MAX_EXEMPLARS_PER_RECORD,
    NAME_PATTERN,
    Basis,
    ExemplarKind,
    RunKind,
    RunState,
    Source,
)

MetricValue = Annotated[
    float, Field(description='float64; NaN/±Inf as JSON tokens or as "nan", "inf", "-inf"')
]
"""A float64 metric value. pydantic parses NaN/Infinity tokens and the strings "nan", "inf",
"-inf" (any case) natively, so no per-value Python hook runs on the hot path."""

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


def _to_epoch(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return value
    return value


EpochSeconds = Annotated[
    float,
    BeforeValidator(_to_epoch),
    Field(ge=0, le=32503680000, allow_inf_nan=False, description="Unix seconds, or ISO 8601"),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunIn(_Strict):
    """Create or update a run. On update, given fields replace stored ones; `config` merges by
    top-level key (so a rollout actor can add `engine` without erasing the trainer's keys)."""

    id: str = Field(pattern=ID_PATTERN, description="Chosen by the client; unique on the server")
    name: str | None = Field(default=None, max_length=200)
    project: str | None = Field(
        default=None, pattern=NAME_PATTERN, description="Defaults to 'default' on creation"
    )
    tags: list[Annotated[str, Field(max_length=100)]] | None = Field(default=None, max_length=64)
    labels: dict[str, Annotated[str, Field(max_length=200)]] | None = None
    config: dict[str, Any] | None = None
    status: RunState | None = None
    kind: RunKind | None = Field(
        default=None,
        description="'training' (the default on creation) or 'parity': a parity report, whose "
        "config carries the effective engine config under `engine`",
    )

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        if labels is not None:
            if len(labels) > 64:
                raise ValueError("at most 64 labels")
            for key in labels:
                if not 0 < len(key) <= 100:
                    raise ValueError(f"label key {key!r} must be 1-100 characters")
        return labels


class BucketTableIn(_Strict):
    """Per-probability-bucket sums (METRICS.md, "Low-probability buckets").

    Sums, not means, so tables from several actors and steps add up exactly.
    """

    basis: Basis = Field(
        default="rollout", description="Binned on exp(lR) (rollout) or exp(lT) (trainer)"
    )
    edges: list[FiniteFloat] = Field(min_length=2, max_length=65)
    tokens: list[FiniteFloat]
    sum_d: list[MetricValue]
    sum_abs_d: list[MetricValue]
    sum_k3: list[MetricValue]
    sum_reverse_k3: list[MetricValue]
    oob: list[FiniteFloat]

    @model_validator(mode="after")
    def _shape(self) -> BucketTableIn:
        if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise ValueError("edges must be strictly increasing")
        n = len(self.edges) - 1
        for name in ("tokens", "sum_d", "sum_abs_d", "sum_k3", "sum_reverse_k3", "oob"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} must have len(edges) - 1 = {n} entries")
        return self


class ExemplarIn(_Strict):
    """One token of a step, kept as evidence: its rollout and trainer logprobs and where it sits.
    The log-ratio is d = trainer_logprob - rollout_logprob (METRICS.md)."""

    kind: ExemplarKind = Field(
        description="top: largest |log-ratio| of the step; uniform: a uniform sample of its tokens"
    )
    seq: int = Field(ge=0, le=2**31 - 1, description="Sequence index within the step")
    pos: int = Field(ge=0, le=2**31 - 1, description="Position within the response")
    rollout_logprob: MetricValue
    trainer_logprob: MetricValue
    token_id: int | None = Field(default=None, ge=0, le=2**31 - 1)
    token: str | None = Field(default=None, max_length=100, description="The decoded token")
    context: str | None = Field(
        default=None, max_length=400, description="The decoded text just before the token"
    )


class RecordIn(_Strict):
    """One step's summary from one actor. Keyed by (run_id, source, actor, step) and metric name:
    a value whose key is already stored changes nothing, so a re-sent batch is harmless."""

    run_id: str = Field(pattern=ID_PATTERN)
    step: int = Field(ge=0, le=2**53)
    source: Source
    actor: str = Field(default="0", pattern=NAME_PATTERN)
    time: EpochSeconds | None = Field(default=None, description="Defaults to arrival time")
    gpu: str | None = Field(
        default=None, max_length=200, description="e.g. 'NVIDIA H100 80GB HBM3' or 'cpu'"
    )
    weight_version: int | None = Field(default=None, ge=0, le=2**53)
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    buckets: list[BucketTableIn] | None = Field(default=None, max_length=4)
    exemplars: list[ExemplarIn] | None = Field(
        default=None,
        max_length=MAX_EXEMPLARS_PER_RECORD,
        description="Token exemplars of the step (opt-in); keyed by (kind, seq, pos), so a "
        "re-sent one changes nothing",
    )

    @field_validator("metrics")
    @classmethod
    def _metric_names(cls, metrics: dict[str, float]) -> dict[str, float]:
        if len(metrics) > 2000:
            raise ValueError("at most 2000 metrics per record")
        for name in metrics:
            if not 0 < len(name) <= 200:
                raise ValueError(f"metric name {name[:40]!r}… must be 1-200 characters")
        return metrics


class AnnotationIn(_Strict):
    """A free-text event on a run (a warning, a weight update). `id` makes a re-send harmless."""

    id: str | None = Field(default=None, pattern=ID_PATTERN)
    run_id: str = Field(pattern=ID_PATTERN)
    step: int | None = Field(default=None, ge=0, le=2**53)
    time: EpochSeconds | None = None
    kind: str = Field(default="note", pattern=NAME_PATTERN)
    source: Source | None = None
    actor: str | None = Field(default=None, pattern=NAME_PATTERN)
    text: str = Field(min_length=1, max_length=4000)


class IngestIn(_Strict):
    """One batch. All-or-nothing: either every record is stored or none is."""

    batch_id: str | None = Field(default=None, max_length=128, description="For logs and tracing")
    run: RunIn | None = None
    records: list[RecordIn] = Field(default_factory=list, max_length=100_000)
    annotations: list[AnnotationIn] = Field(default_factory=list, max_length=10_000)


class IngestOut(BaseModel):
    accepted: int = Field(description="Records that added at least one new value")
    duplicates: int = Field(description="Records whose every value was already stored")
    annotations: int = Field(default=0, description="Annotations newly stored")
