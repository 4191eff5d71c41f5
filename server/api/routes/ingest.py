"""POST /api/v1/ingest — the collectors' one write endpoint."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from server.api.deps import IngestDep, PrincipalDep
from server.schemas.ingest import IngestIn, IngestOut

router = APIRouter(prefix="/api/v1", tags=["ingest"])


@router.post(
    "/ingest",
    response_model=IngestOut,
    summary="Store a batch of step summaries (all-or-nothing, idempotent)",
    responses={
        401: {"description": "token missing or invalid"},
        403: {"description": "token lacks the ingest scope or this project"},
        404: {"description": "a record names a run that does not exist and the batch has no `run`"},
        409: {"description": "the run exists in another project"},
        413: {"description": "body over the size limit"},
        422: {"description": "malformed JSON or a field that breaks the schema (path named)"},
    },
)
async def ingest(batch: IngestIn, service: IngestDep, principal: PrincipalDep) -> IngestOut:
    """Accepts gzip bodies (`Content-Encoding: gzip`). NaN and ±Inf are accepted as JSON tokens
    (`NaN`, `Infinity`, `-Infinity`) and as the strings "nan", "inf", "-inf". A value whose
    (run, source, actor, step, metric) is already stored changes nothing."""
    return await run_in_threadpool(service.ingest, batch, principal)
