"""The runs list: a page of runs the reader may see, filtered and sorted in the database, and
the projects they belong to."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.responses import Response

from server.api.deps import ReaderDep, ReadsDep
from server.api.read_outs import run_page_out
from server.api.responses import model_response
from server.domain.names import RunKind
from server.domain.names import RunSort as Sort
from server.domain.reads.scope import ReadScope
from server.schemas.reads import ListOut, RunPageOut
from server.services.reads.lookup import run_conditions

router = APIRouter(prefix="/api/v1", tags=["query"])


@router.get("/projects", response_model=ListOut[str])
def list_projects(reads: ReadsDep, principal: ReaderDep) -> ListOut[str]:
    data = reads.runs.projects(ReadScope.of(principal.readable_projects()))
    return ListOut(data=data, count=len(data))


@router.get("/runs", response_model=RunPageOut)
def list_runs(
    reads: ReadsDep,
    principal: ReaderDep,
    project: Annotated[str | None, Query(max_length=128)] = None,
    label: Annotated[
        str | None,
        Query(max_length=300, description="KEY, KEY=VALUE, KEY= (empty) or !KEY (absent)"),
    ] = None,
    tag: Annotated[str | None, Query(max_length=100)] = None,
    text: Annotated[
        str | None, Query(max_length=200, description="Substring of name or id")
    ] = None,
    sort: Annotated[Sort, Query(description="activity | created | name | k3 | alarms")] = (
        "activity"
    ),
    order: Literal["desc", "asc"] = "desc",
    cursor: Annotated[
        str | None,
        Query(
            description="`next_cursor` of the previous page; any other text answers 400 "
            "(checked by the cursor codec, length included)"
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 50,
    kind: Annotated[
        RunKind | None, Query(description="training or parity (parity reports only)")
    ] = None,
    status: Annotated[
        str | None,
        Query(
            max_length=100,
            description="live, idle, finished or failed; several comma-separated match any",
        ),
    ] = None,
    gpu: Annotated[
        str | None,
        Query(
            max_length=200,
            description="A part of a GPU type one of its actors reported, any case (H100)",
        ),
    ] = None,
    config: Annotated[
        str | None,
        Query(
            max_length=8000,
            description='A JSON object, e.g. {"vllm_version": "0.32.0", "enforce_eager": true}: '
            "runs whose config holds each top-level key with that value (strings and booleans "
            "exactly, numbers by value, null a key set to null; at most 16 keys)",
        ),
    ] = None,
    since: Annotated[
        float | None,
        Query(ge=0, allow_inf_nan=False, description="Last active at or after (Unix seconds)"),
    ] = None,
    until: Annotated[
        float | None,
        Query(ge=0, allow_inf_nan=False, description="Last active at or before (Unix seconds)"),
    ] = None,
) -> Response:
    """A page of runs, most recently active first unless sorted otherwise; `next_cursor`
    continues in the same order (runs that arrive meanwhile do not shift the pages). Every
    filter runs in the database; a run's last activity is its last batch, else its creation."""
    conditions = run_conditions(status=status, gpu=gpu, config=config, since=since, until=until)
    page = reads.runs.runs_page(
        ReadScope.of(principal.readable_projects()),
        project=project,
        label=label,
        tag=tag,
        text=text,
        sort=sort,
        descending=order == "desc",
        cursor=cursor,
        limit=limit,
        kind=kind,
        conditions=conditions,
    )
    return model_response(run_page_out(page))
