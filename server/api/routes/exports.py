"""Export API: runs' values at full resolution, streamed as Arrow, Parquet or CSV.

Every filter is checked before the answer starts (a 4xx names the field at fault); the values
then stream batch by batch, each read on a connection of its own, so a request holds one batch
whatever the runs hold. Token-scoped like every read: a read token exports only its project.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.responses import StreamingResponse

from server.api.deps import ReadScopeDep, ReadsDep
from server.api.export_stream import MEDIA_TYPES, SUFFIXES, Format, encode, released
from server.api.params import StepMax, StepMin
from server.domain.names import Source
from server.errors import Rejected
from server.services.reads.exports import SCHEMA

router = APIRouter(prefix="/api/v1", tags=["export"])

VALUES_HEADER = "X-Export-Values"

_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "One row per stored value — project, run_id, source, actor, metric "
        "(dictionary-encoded in Arrow and Parquet), step, value (float64, NaN and ±Inf "
        f"included) — run by run in the order asked, then metric, source, actor, step. "
        f"`{VALUES_HEADER}` says how many values the series hold (an upper bound of the rows "
        "when a step range is given).",
        "content": {
            media: {"schema": {"type": "string", "format": "binary"}}
            for media in MEDIA_TYPES.values()
        },
    },
    404: {"description": "A run (or, with `metrics`, a metric) that the reader cannot find"},
    422: {"description": "A filter out of range: the message and `info.field` name it"},
}


def _names(text: str | None, field: str) -> list[str] | None:
    if text is None:
        return None
    items = list(dict.fromkeys(i.strip() for i in text.split(",") if i.strip()))
    if not items:
        raise Rejected(f"{field}: a comma-separated list of names", detail={"field": field})
    return items


@router.get("/export", response_class=StreamingResponse, responses=_RESPONSES)
def export(
    reads: ReadsDep,
    scope: ReadScopeDep,
    runs: Annotated[
        str, Query(min_length=1, max_length=200_000, description="Run ids, a,b,c (at most 1000)")
    ],
    metrics: Annotated[
        str | None,
        Query(min_length=1, max_length=200_000, description="Metric names a,b,c (default: all)"),
    ] = None,
    source: Annotated[Source | None, Query(description="Only this side's series")] = None,
    step_min: StepMin = None,
    step_max: StepMax = None,
    fmt: Annotated[
        Format, Query(alias="format", description="arrow (IPC stream), parquet or csv")
    ] = "arrow",
) -> StreamingResponse:
    """Every stored value of the runs' series — no sampling, no buckets — for notebooks and
    post-mortems; what `collectors.Api` and `mismatch export` read. Values that retention
    dropped are no longer raw and are not exported (their roll-ups still draw charts)."""
    plan = reads.exports.plan(
        scope,
        _names(runs, "runs") or [],
        metrics=_names(metrics, "metrics"),
        source=source,
        step_min=step_min,
        step_max=step_max,
    )
    name = "export" if len(plan.heads) == 0 else plan.heads[0].run_id
    filename = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:100]
    return StreamingResponse(
        released(encode(plan.batches(), SCHEMA, fmt)),
        media_type=MEDIA_TYPES[fmt],
        headers={
            VALUES_HEADER: str(plan.values),
            "Content-Disposition": f'attachment; filename="{filename}{SUFFIXES[fmt]}"',
            "Cache-Control": "no-store",
        },
    )
