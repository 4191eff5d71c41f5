"""What the read API returns (and what the dashboard reads through the read service).

Lists leave the server wrapped as `{data, count}`. Times are Unix seconds (float).
Non-finite values are data: JSON responses carry them as `NaN`, `Infinity`, `-Infinity`.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from server.domain.names import DEFAULT_RUN_KIND, ExemplarKind, RunKind, RunStatus, Source

T = TypeVar("T")


class Out(BaseModel):
    """What leaves the server. NaN and ±Inf serialise as the JSON tokens `NaN`, `Infinity`,
    `-Infinity` (the project's own responses and the collectors read them back)."""

    model_config = ConfigDict(ser_json_inf_nan="constants")


class ListOut(Out, Generic[T]):
    data: list[T]
    count: int


class SignalOut(Out):
    """A run's headline mismatch signal (`server.domain.signals`): the strongest it logs."""

    metric: str = Field(description="The metric's name as stored, e.g. abs_logp_diff_mean")
    label: str = Field(description="Its short name, e.g. mean |logp diff|")
    meaning: str = Field(description="What it measures and its healthy range, in words")
    value: float = Field(description="Its latest value (the trainer's)")


class RunSummaryOut(Out):
    id: str
    name: str
    project: str
    tags: list[str]
    labels: dict[str, str]
    status: RunStatus = Field(
        description="live: a step in the last 2 min; idle: quiet; finished/failed: said so"
    )
    created_at: float
    last_seen: float | None
    last_step: int | None
    gpus: list[str]
    latest: dict[str, float] = Field(
        description="Latest value of each canonical metric (trainer side first)"
    )
    headline: SignalOut | None = Field(
        default=None,
        description="The run's strongest mismatch signal and its latest value (none: it logs "
        "no mismatch signal)",
    )
    firing_alerts: int = Field(default=0, description="Alerts of the run firing now")
    raw_dropped: bool = Field(
        default=False, description="Retention dropped the run's raw values; rollups remain"
    )
    kind: RunKind = Field(
        default=DEFAULT_RUN_KIND, description="training, or parity (a `mismatch parity` report)"
    )
    ended_at: float | None = Field(
        default=None,
        description="When a finished or failed run said it ended (the collectors' close(), a "
        "framework's end of training, an import); none while it runs",
    )


class RunPageOut(Out):
    """One page of runs; `next_cursor` (when there is more) continues in the same order."""

    data: list[RunSummaryOut]
    count: int = Field(description="Runs on this page")
    total: int = Field(description="Runs matching the filters, on every page")
    next_cursor: str | None = None


class ActorOut(Out):
    source: str
    actor: str
    gpu: str | None
    first_step: int
    last_step: int
    steps: int


class GpuSegmentOut(Out):
    """A stretch of a run on one GPU type (a run resumed on other hardware has two)."""

    source: str
    gpu: str = Field(description="GPU type; several joined by '+' when a step's actors differ")
    first_step: int
    last_step: int


class AnnotationOut(Out):
    id: str
    run_id: str
    step: int | None
    time: float
    kind: str
    source: str | None
    actor: str | None
    text: str


class RunConfigOut(Out):
    """A run's name and config only: what a comparison of configs needs."""

    id: str
    name: str
    config: dict[str, Any]


class RunDetailOut(RunSummaryOut):
    config: dict[str, Any]
    actors: list[ActorOut]
    annotations: list[AnnotationOut]
    gpu_segments: list[GpuSegmentOut] = Field(
        default_factory=list, description="Per source, the run's GPU types in step order"
    )


class MetricOut(Out):
    name: str
    source: str
    actors: list[str]
    points: int


class SeriesPointOut(Out):
    """One step bucket of a downsampled series. With no downsampling a bucket holds one step
    and min = max = mean = last. min/max/mean are over finite values only; the non-finite ones
    are counted, so a NaN or an Inf is never hidden by a bucket."""

    step: int = Field(description="First step in the bucket")
    step_end: int = Field(description="Last step in the bucket")
    time: float | None = Field(description="Wall time of the bucket's last step")
    min: float | None
    max: float | None
    mean: float | None
    last: float = Field(description="Value at the bucket's last step (may be NaN/Inf)")
    count: int
    nan: int = 0
    pos_inf: int = 0
    neg_inf: int = 0


class SeriesOut(Out):
    run_id: str
    metric: str
    source: str | None
    actor: str | None
    step_min: int | None
    step_max: int | None
    total_points: int = Field(description="Raw points in the range before downsampling")
    downsampled: bool
    bucket_steps: int = Field(
        default=1, description="Steps per bucket; buckets start at multiples of it"
    )
    rollup_only: bool = Field(
        default=False,
        description="Drawn from rollups only: retention dropped this range's raw values",
    )
    points: list[SeriesPointOut]


class BucketRowOut(Out):
    """Token-probability bucket sums over a step range (add up exactly across actors and steps)."""

    group: str = Field(description="'all', a GPU name or an actor, by group_by")
    basis: str
    lo: float
    hi: float
    tokens: float
    sum_d: float
    sum_abs_d: float
    sum_k3: float
    sum_reverse_k3: float
    oob: float
    steps: int = Field(description="Step records behind the sums (an actor's step each)")
    actors: int


class BucketStepOut(Out):
    """One cell of the bucket × step heatmap: a bucket's sums over a block of steps."""

    step: int = Field(description="First step of the block")
    step_end: int
    lo: float
    hi: float
    tokens: float
    sum_abs_d: float
    sum_k3: float
    oob: float


class HardwareOut(Out):
    """Distribution of one metric over the steps of one GPU type (box-plot quantiles)."""

    gpu: str
    metric: str
    runs: int
    actors: int
    steps: int = Field(description="Finite values of the GPU type (min, max and mean are of all)")
    nonfinite: int
    min: float | None
    p05: float | None
    q1: float | None
    median: float | None
    q3: float | None
    p95: float | None
    max: float | None
    mean: float | None
    quantiles_from: int = Field(
        default=0,
        description="Finite values the quantiles were computed from: all of them (= steps) up "
        "to 20,000, else evenly spaced step windows of every run holding about 20,000",
    )


class ExemplarOut(Out):
    """One token exemplar of a step. d = trainer_logprob - rollout_logprob; NaN/±Inf are data."""

    step: int
    source: Source
    actor: str
    kind: ExemplarKind
    seq: int
    pos: int
    rollout_logprob: float
    trainer_logprob: float
    token_id: int | None = None
    token: str | None = None
    context: str | None = None
