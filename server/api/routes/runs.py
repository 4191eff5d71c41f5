"""Read API: runs, metrics, series (downsampled, spikes kept), buckets, hardware.

The analytical reads (series, exemplars, the hardware comparison and its report page) run under
the server's analysis deadline (`server.api.bounded`): past it they answer 503 with Retry-After,
and their work stops when the client goes away or the server stops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from starlette.responses import HTMLResponse, Response

from server.analysis.comparison import MAX_N_BOOT
from server.api.bounded import AnalysisDep
from server.api.deps import ReaderDep, ReadScopeDep, ReadsDep
from server.api.params import ResolutionParam, StepMax, StepMin
from server.api.read_outs import hardware_out, listed, out
from server.api.responses import model_response
from server.auth import Principal
from server.domain.names import ExemplarKind
from server.domain.reads.scope import ReadScope
from server.errors import Rejected
from server.reports.hardware import hardware_report
from server.schemas.hardware import HardwareComparisonOut
from server.schemas.reads import (
    BucketRowOut,
    BucketStepOut,
    ExemplarOut,
    ListOut,
    MetricOut,
    RunDetailOut,
    SeriesOut,
)

router = APIRouter(prefix="/api/v1", tags=["query"])

MaxPoints = Annotated[int, Query(ge=1, le=100_000, description="At most this many step buckets")]
Source = Annotated[Literal["trainer", "rollout"] | None, Query()]
Name = Annotated[str, Query(min_length=1, max_length=200)]
BucketSteps = Annotated[
    int | None,
    Query(
        ge=1,
        le=2**53,
        description="Buckets of exactly this many steps (aligned to multiples of it from step 0) "
        "instead of a width fitting max_points: what a live view polls with to extend the "
        "buckets it holds (the `bucket_steps` of its first answer); refused when the range "
        "needs more than max_points of them",
    ),
]


@router.get("/trends", response_model=dict[str, list[float]])
def get_trends(
    reads: ReadsDep,
    scope: ReadScopeDep,
    runs: Annotated[str, Query(min_length=1, max_length=10_000, description="a,b,c")],
    metric: Annotated[
        str | None,
        Query(min_length=1, max_length=200, description="default: each run's headline signal"),
    ] = None,
    points: Annotated[int, Query(ge=2, le=500)] = 30,
) -> dict[str, list[float]]:
    """Each run's metric in about `points` buckets (mean of each bucket's finite values): the
    trend column of a runs table, for a page of runs in one read. Without `metric`, each run's
    strongest mismatch signal (`headline` of its summary)."""
    ids = _split(runs, "runs", "run ids")
    if len(ids) > 500:
        raise Rejected("at most 500 runs at once")
    return reads.runs.trends(scope, ids, metric=metric, points=points)


@router.get("/runs/{run_id}", response_model=RunDetailOut)
def get_run(run_id: str, reads: ReadsDep, scope: ReadScopeDep) -> RunDetailOut:
    """Config, actors, GPU types, last step, latest canonical values and annotations."""
    return out(RunDetailOut, reads.runs.get_run(scope, run_id))


@router.get("/runs/{run_id}/metrics", response_model=ListOut[MetricOut])
def list_metrics(run_id: str, reads: ReadsDep, scope: ReadScopeDep) -> ListOut[MetricOut]:
    return listed(MetricOut, reads.runs.list_metrics(scope, run_id))


@router.get("/runs/{run_id}/series", response_model=SeriesOut)
async def get_series(
    run_id: str,
    reads: ReadsDep,
    scope: ReadScopeDep,
    analysis: AnalysisDep,
    metric: Name,
    source: Source = None,
    actor: Annotated[str | None, Query(max_length=128)] = None,
    step_min: StepMin = None,
    step_max: StepMax = None,
    max_points: MaxPoints = 1000,
    bucket_steps: BucketSteps = None,
    resolution: ResolutionParam = "buckets",
) -> Response:
    """Downsampled into at most `max_points` step buckets, each with min, max, mean and last
    over its finite values and counts of NaN/±Inf: a one-step spike is never lost."""
    series = await analysis.run(  # mapped to the HTTP model off the event loop too
        lambda _: out(
            SeriesOut,
            reads.series.series(
                scope,
                run_id,
                metric,
                source=source,
                actor=actor,
                step_min=step_min,
                step_max=step_max,
                max_points=max_points,
                bucket_steps=bucket_steps,
                resolution=resolution,
            ),
        )
    )
    return model_response(series)


def _split(text: str, param: str, what: str) -> list[str]:
    items = [r.strip() for r in text.split(",") if r.strip()]
    if not items:
        raise Rejected(f"{param} must be a comma-separated list of {what}")
    return items


@router.get("/series", response_model=ListOut[SeriesOut])
async def overlay_series(
    reads: ReadsDep,
    scope: ReadScopeDep,
    analysis: AnalysisDep,
    runs: Annotated[str, Query(min_length=1, max_length=10_000, description="a,b,c")],
    metric: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    metrics: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=10_000,
            description="Several metrics, a,b,c (instead of `metric`): each run's series of "
            "each, read together — what a run page draws",
        ),
    ] = None,
    source: Source = None,
    step_min: StepMin = None,
    step_max: StepMax = None,
    max_points: MaxPoints = 1000,
    bucket_steps: BucketSteps = None,
    resolution: ResolutionParam = "buckets",
) -> Response:
    """Series of several runs (overlays) or several metrics (a run page), run by run in the
    order asked; a metric a run lacks is left out."""
    if (metric is None) == (metrics is None):
        raise Rejected("give either `metric` (one) or `metrics` (a,b,c), not both or neither")
    run_ids = _split(runs, "runs", "run ids")
    names = [metric] if metric is not None else _split(metrics or "", "metrics", "metric names")
    data = await analysis.run(
        lambda _: listed(
            SeriesOut,
            reads.series.series_grid(
                scope,
                run_ids,
                names,
                source=source,
                step_min=step_min,
                step_max=step_max,
                max_points=max_points,
                bucket_steps=bucket_steps,
                resolution=resolution,
            ),
        )
    )
    return model_response(data)


@router.get("/runs/{run_id}/buckets", response_model=ListOut[BucketRowOut])
def get_buckets(
    run_id: str,
    reads: ReadsDep,
    scope: ReadScopeDep,
    step_min: StepMin = None,
    step_max: StepMax = None,
    group_by: Literal["none", "gpu", "actor"] = "none",
    basis: Literal["rollout", "trainer"] = "rollout",
) -> Response:
    """Token-probability bucket sums over a step range, per GPU or actor if asked."""
    data = reads.series.buckets(
        scope, [run_id], step_min=step_min, step_max=step_max, group_by=group_by, basis=basis
    )
    return model_response(listed(BucketRowOut, data))


@router.get("/runs/{run_id}/exemplars", response_model=ListOut[ExemplarOut])
async def get_exemplars(
    run_id: str,
    reads: ReadsDep,
    scope: ReadScopeDep,
    analysis: AnalysisDep,
    step_min: StepMin = None,
    step_max: StepMax = None,
    kind: Annotated[
        ExemplarKind | None,
        Query(description="top (largest |log-ratio| of each step) or uniform (a sample)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
) -> Response:
    """The run's token exemplars over a step range, largest |d| = |trainer - rollout logprob|
    first (NaN and ±Inf first of all): the worst tokens, with their position and context."""
    data = await analysis.run(
        lambda _: listed(
            ExemplarOut,
            reads.runs.exemplars(
                scope, run_id, step_min=step_min, step_max=step_max, kind=kind, limit=limit
            ),
        )
    )
    return model_response(data)


@router.get("/runs/{run_id}/bucket-steps", response_model=ListOut[BucketStepOut])
def get_bucket_steps(
    run_id: str,
    reads: ReadsDep,
    scope: ReadScopeDep,
    step_min: StepMin = None,
    step_max: StepMax = None,
    basis: Literal["rollout", "trainer"] = "rollout",
    max_points: Annotated[int, Query(ge=1, le=2000)] = 200,
) -> Response:
    """Bucket × step-block sums, for heatmaps."""
    data = reads.series.bucket_steps(
        scope, run_id, step_min=step_min, step_max=step_max, basis=basis, max_points=max_points
    )
    return model_response(listed(BucketStepOut, data))


HardwareMetric = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=200,
        description="The metric compared (default: the strongest mismatch signal the runs share)",
    ),
]
HardwareRuns = Annotated[
    str | None, Query(max_length=10_000, description="Run ids a,b,c (default: the project's)")
]
HardwareLabel = Annotated[
    str | None, Query(max_length=300, description="Runs whose labels match KEY=VALUE, KEY or !KEY")
]
GroupByParam = Annotated[
    str | None,
    Query(
        max_length=300,
        description="What runs must share to be compared: parity (every parity-relevant "
        "setting, the default), label:KEY or config:KEY",
    ),
]
NBoot = Annotated[int, Query(ge=100, le=MAX_N_BOOT, description="Bootstrap resamples per GPU type")]


@dataclass(frozen=True)
class HardwareAsk:
    """What a hardware comparison is asked for; the API and its HTML report take the same."""

    metric: str | None
    run_ids: list[str] | None
    project: str | None
    label: str | None
    group_by: str | None
    n_boot: int

    def scope(self, principal: Principal) -> ReadScope:
        """What `principal` may read, narrowed to the project asked for."""
        return ReadScope.of(principal.narrowed(self.project))


def hardware_ask(
    metric: HardwareMetric = None,
    runs: HardwareRuns = None,
    project: Annotated[str | None, Query(max_length=128)] = None,
    label: HardwareLabel = None,
    group_by: GroupByParam = None,
    n_boot: NBoot = 1000,
) -> HardwareAsk:
    run_ids = _split(runs, "runs", "run ids") if runs else None
    return HardwareAsk(metric, run_ids, project, label, group_by, n_boot)


HardwareAskDep = Annotated[HardwareAsk, Depends(hardware_ask)]


@router.get("/hardware", response_model=HardwareComparisonOut)
async def get_hardware(
    reads: ReadsDep, principal: ReaderDep, analysis: AnalysisDep, ask: HardwareAskDep
) -> Response:
    """A metric per GPU type over the selected runs (`data`, pooled), and like for like: the
    group of runs that share the compared settings, ratios of medians between GPU types with
    block-bootstrap intervals, and the runs left out with the setting that keeps them out.
    A group spanning more than 12 GPU types is refused (422) with how to narrow it."""
    found = await analysis.run(
        lambda deadline: hardware_out(
            reads.hardware.comparison(
                ask.scope(principal),
                metric=ask.metric,
                run_ids=ask.run_ids,
                project=ask.project,
                label=ask.label,
                group_by=ask.group_by,
                n_boot=ask.n_boot,
                deadline=deadline,
            )
        )
    )
    return model_response(found)


@router.get("/hardware/report", response_class=HTMLResponse)
async def get_hardware_report(
    reads: ReadsDep, principal: ReaderDep, analysis: AnalysisDep, ask: HardwareAskDep
) -> HTMLResponse:
    """The same comparison as one self-contained HTML page (figures and plotly.js inlined), for
    a write-up or an incident review."""
    page = await analysis.run(
        lambda deadline: hardware_report(
            reads,
            ask.scope(principal),
            metric=ask.metric,
            run_ids=ask.run_ids,
            project=ask.project,
            label=ask.label,
            group_by=ask.group_by,
            n_boot=ask.n_boot,
            deadline=deadline,
        )
    )
    return HTMLResponse(page)
