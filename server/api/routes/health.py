"""Liveness and Prometheus metrics."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Header, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import PlainTextResponse, Response

from server.api.deps import ServicesDep
from server.api.responses import JSONResponse
from server.container import Services
from server.errors import Forbidden
from server.storage.schema import migrate

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
async def metrics(
    request: Request,
    services: ServicesDep,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    """Needs, when the server needs tokens, the `--metrics-token` secret (everything) or a read
    or admin token, or a signed-in person (their projects' live runs only)."""
    projects = await run_in_threadpool(_scrape_scope, services, authorization, request)
    body = await run_in_threadpool(services.telemetry.render, projects)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


def _scrape_scope(
    services: Services, authorization: str | None, request: Request
) -> list[str] | None:
    secret = services.settings.metrics_token
    if (
        secret
        and authorization
        and hmac.compare_digest(authorization.encode(), f"Bearer {secret}".encode())
    ):
        return None
    principal = services.people.identity.resolve_scope(request.scope).principal
    if not principal.can_read:
        raise Forbidden("an ingest token cannot scrape /metrics; use a read token")
    return principal.readable_projects()
