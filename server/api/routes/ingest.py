"""POST /api/v1/ingest — the collectors' one write endpoint.

The body is read as bytes and parsed by the compact wire decoder, or by the models for what it
leaves to them, into the domain batch the ingest service takes (`server.schemas.batches`); the
OpenAPI document still describes it as `IngestIn` (see `document_body`). The body is taken as
the body middleware hands it (one buffer, not joined again) and dropped once parsed, before the
batch is stored: a request holds its body or its columns, not both.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from server.api.deps import IngestDep, PrincipalDep
from server.api.wire import CLIENT_PARAMETERS, check_client
from server.auth import Principal
from server.schemas.batches import parse_batch
from server.schemas.ingest import IngestIn, IngestOut
from server.services.ingest import IngestService

router = APIRouter(prefix="/api/v1", tags=["ingest"])

_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/IngestIn"}}},
}


@router.post(
    "/ingest",
    response_model=IngestOut,
    summary="Store a batch of step summaries (all-or-nothing, idempotent)",
    openapi_extra={"requestBody": _BODY, "parameters": CLIENT_PARAMETERS},
    responses={
        400: {"description": "a client speaking an ingest format this server does not"},
        401: {"description": "token missing or invalid"},
        403: {"description": "token lacks the ingest scope or this project"},
        404: {"description": "a record names a run that does not exist and the batch has no `run`"},
        409: {"description": "the run exists in another project"},
        413: {"description": "body over the size limit"},
        422: {"description": "malformed JSON or a field that breaks the schema (path named)"},
    },
)
async def ingest(
    request: Request,
    service: IngestDep,
    principal: PrincipalDep,
    notify: Annotated[
        bool,
        Query(
            description="Send the alerts this batch raises to the project's receivers (false: "
            "record and show them only — an import of a run's past, which must not page)"
        ),
    ] = True,
) -> IngestOut:
    """Accepts gzip bodies (`Content-Encoding: gzip`). NaN and ±Inf are accepted as JSON tokens
    (`NaN`, `Infinity`, `-Infinity`) and as the strings "nan", "inf", "-inf". A value whose
    (run, source, actor, step, metric) is already stored changes nothing. A client naming an
    ingest format other than this server's (`X-Mismatch-Wire`) gets a 400 naming both."""
    check_client(request.headers)
    body = [await _body(request)]  # the worker takes it out, so only the parse holds it
    return await run_in_threadpool(_parse_and_store, service, body, principal, notify)


async def _body(request: Request) -> bytes | bytearray:
    """The body as it arrived in one piece (the body middleware reads it whole), or joined."""
    parts = [part async for part in request.stream() if part]
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _parse_and_store(
    service: IngestService, body: list[bytes | bytearray], principal: Principal, notify: bool
) -> IngestOut:
    try:
        batch = parse_batch(body.pop())
    except ValidationError as exc:  # answered as FastAPI answers a body it validated itself
        raise RequestValidationError(exc.errors(include_url=False)) from None
    result = service.ingest(batch, principal, notify=notify)
    return IngestOut(
        accepted=result.accepted,
        duplicates=result.duplicates,
        annotations=result.annotations,
        alerts=result.alerts_opened,
    )


def document_body(schema: dict[str, Any]) -> dict[str, Any]:
    """Add `IngestIn` and the models it uses to an OpenAPI document's components."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    model = IngestIn.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in model.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components.setdefault("IngestIn", model)
    return schema
