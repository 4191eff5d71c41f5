"""What the read API returns (and what the dashboard reads through the read service).

Lists leave the server wrapped as `{data, count}`. Times are Unix seconds (float).
Non-finite values are data: JSON responses carry them as `NaN`, `Infinity`, `-Infinity`.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from server.domain.names import DEFAULT_RUN_KIND
from server.domain.reads.hardware import HardwareRow
from server.domain.reads.runs import (
    Actor,
    Annotation,
    Exemplar,
    GpuSegment,
    Headline,
    MetricInfo,
    RunConfig,
    RunDetail,
    RunSummary,
)
from server.domain.reads.series import BucketRow, BucketStep, Series, SeriesPoint
from server.schemas.derive import derived_from

T = TypeVar("T")


class Out(BaseModel):
    """What leaves the server. NaN and ±Inf serialise as the JSON tokens `NaN`, `Infinity`,
    `-Infinity` (the project's own responses and the collectors read them back)."""

    model_config = ConfigDict(ser_json_inf_nan="constants")


class ListOut(Out, Generic[T]):
    data: list[T]
    count: int


@derived_from(
    Headline,
    metric=Field(description="The metric's name as stored, e.g. abs_logp_diff_mean"),
    label=Field(description="Its short name, e.g. mean |logp diff|"),
    meaning=Field(description="What it measures and its healthy range, in words"),
    value=Field(description="Its latest value (the trainer's)"),
)
class SignalOut(Out):
    """A run's headline mismatch signal (`server.domain.signals`): the strongest it logs."""


@derived_from(
    RunSummary,
    status=Field(
        description="live: a step in the last 2 min; idle: quiet; finished/failed: said so"
    ),
    latest=Field(description="Latest value of each canonical metric (trainer side first)"),
    headline=Field(
        default=None,
        description="The run's strongest mismatch signal and its latest value (none: it logs "
        "no mismatch signal)",
    ),
    firing_alerts=Field(default=0, description="Alerts of the run firing now"),
    raw_dropped=Field(
        default=False, description="Retention dropped the run's raw values; rollups remain"
    ),
    kind=Field(
        default=DEFAULT_RUN_KIND, description="training, or parity (a `mismatch parity` report)"
    ),
    ended_at=Field(
        default=None,
        description="When a finished or failed run said it ended (the collectors' close(), a "
        "framework's end of training, an import); none while it runs",
    ),
)
class RunSummaryOut(Out):
    pass


class RunPageOut(Out):
    """One page of runs; `next_cursor` (when there is more) continues in the same order."""

    data: list[RunSummaryOut]
    count: int = Field(description="Runs on this page")
    total: int = Field(description="Runs matching the filters, on every page")
    next_cursor: str | None = None


@derived_from(Actor)
class ActorOut(Out):
    pass


@derived_from(
    GpuSegment,
    gpu=Field(description="GPU type; several joined by '+' when a step's actors differ"),
)
class GpuSegmentOut(Out):
    """A stretch of a run on one GPU type (a run resumed on other hardware has two)."""


@derived_from(Annotation)
class AnnotationOut(Out):
    pass


@derived_from(RunConfig)
class RunConfigOut(Out):
    """A run's name and config only: what a comparison of configs needs."""


@derived_from(
    RunDetail,
    gpu_segments=Field(
        default_factory=list, description="Per source, the run's GPU types in step order"
    ),
)
class RunDetailOut(RunSummaryOut):
    pass


@derived_from(MetricInfo)
class MetricOut(Out):
    pass


@derived_from(
    SeriesPoint,
    after={"time": "step_end"},
    step=Field(description="First step in the bucket"),
    step_end=Field(description="Last step in the bucket"),
    time=Field(description="Wall time of the bucket's last step"),
    last=Field(description="Value at the bucket's last step (may be NaN/Inf)"),
    nan=0,
    pos_inf=0,
    neg_inf=0,
)
class SeriesPointOut(Out):
    """One step bucket of a downsampled series. With no downsampling a bucket holds one step
    and min = max = mean = last. min/max/mean are over finite values only; the non-finite ones
    are counted, so a NaN or an Inf is never hidden by a bucket."""


@derived_from(
    Series,
    total_points=Field(description="Raw points in the range before downsampling"),
    bucket_steps=Field(default=1, description="Steps per bucket; buckets start at multiples of it"),
    rollup_only=Field(
        default=False,
        description="Drawn from rollups only: retention dropped this range's raw values",
    ),
)
class SeriesOut(Out):
    pass


@derived_from(
    BucketRow,
    group=Field(description="'all', a GPU name or an actor, by group_by"),
    steps=Field(description="Step records behind the sums (an actor's step each)"),
)
class BucketRowOut(Out):
    """Token-probability bucket sums over a step range (add up exactly across actors and steps)."""


@derived_from(BucketStep, step=Field(description="First step of the block"))
class BucketStepOut(Out):
    """One cell of the bucket × step heatmap: a bucket's sums over a block of steps."""


@derived_from(
    HardwareRow,
    steps=Field(description="Finite values of the GPU type (min, max and mean are of all)"),
    quantiles_from=Field(
        default=0,
        description="Finite values the quantiles were computed from: all of them (= steps) up "
        "to 20,000, else evenly spaced step windows of every run holding about 20,000",
    ),
)
class HardwareOut(Out):
    """Distribution of one metric over the steps of one GPU type (box-plot quantiles)."""


@derived_from(Exemplar, token_id=None, token=None, context=None)
class ExemplarOut(Out):
    """One token exemplar of a step. d = trainer_logprob - rollout_logprob; NaN/±Inf are data."""
