"""Liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.responses import PlainTextResponse, Response

from server.api.deps import ServicesDep
from server.api.responses import JSONResponse
from server.storage import migrate

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness and database reachability")
def healthz(services: ServicesDep) -> Response:
    db = services.db
    try:
        revision = migrate.current_revision(db)
    except Exception as exc:
        return JSONResponse({"status": "error", "detail": str(exc)[:300]}, status_code=503)
    return JSONResponse({"status": "ok", "database": db.dialect, "schema": revision})


@router.get("/metrics", summary="Prometheus text exposition", response_class=PlainTextResponse)
async def metrics(services: ServicesDep) -> Response:
    body = await run_in_threadpool(services.telemetry.render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
