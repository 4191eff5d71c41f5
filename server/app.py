"""The composition root: wires storage, services, API, alarms and the dashboard together.

Nothing else constructs services; routes and the dashboard receive what they need from here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI

from server.api import errors
from server.api.middleware import BodyLimitMiddleware
from server.api.responses import JSONResponse
from server.api.routes import health, ingest, runs, tokens
from server.config import Settings
from server.errors import NotFound
from server.services.ingest import IngestService
from server.services.query import QueryService
from server.services.tokens import TokenService
from server.storage import migrate
from server.storage.db import Database
from server.telemetry import Telemetry

log = logging.getLogger("mismatch_monitor.server")


@dataclass
class Services:
    settings: Settings
    db: Database
    query: QueryService
    ingest: IngestService
    tokens: TokenService
    telemetry: Telemetry
    extras: dict[str, Any] = field(default_factory=dict)


def build_services(settings: Settings, *, db: Database | None = None) -> Services:
    db = db or Database(settings.db)
    query = QueryService(db, live_window_s=settings.live_window_s)
    telemetry = Telemetry(query)
    ingest_service = IngestService(db, listeners=[telemetry])
    token_service = TokenService(
        db, require_tokens=not settings.is_loopback and not settings.insecure
    )
    return Services(settings, db, query, ingest_service, token_service, telemetry)


def create_app(settings: Settings | None = None, *, migrate_db: bool = True) -> FastAPI:
    settings = settings or Settings()
    services = build_services(settings)
    if migrate_db:
        migrate.upgrade(services.db)
    _attach_alarms(services)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for starter in services.extras.get("start", []):
            starter()
        try:
            yield
        finally:
            for stopper in services.extras.get("stop", []):
                stopper()
            services.ingest.close()
            services.db.dispose()

    app = FastAPI(
        title="Mismatch Monitor",
        version="0.1.0",
        description=(
            "Watches the training-inference mismatch (vllm-kl) of online RL runs. Collectors post "
            "per-step summaries to /api/v1/ingest; the query API serves runs, downsampled series "
            "(spikes kept), probability buckets and hardware breakdowns."
        ),
        default_response_class=JSONResponse,
        lifespan=lifespan,
    )
    app.state.services = services
    errors.install(app)
    for router in (health.router, ingest.router, runs.router, tokens.router):
        app.include_router(router)
    for router in services.extras.get("routers", []):
        app.include_router(router)
    _document_ingest_body(app)

    @app.api_route(
        "/api/{rest:path}",
        methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
        include_in_schema=False,
    )
    def unknown_api_path(rest: str) -> None:
        """Unknown API paths answer 404 JSON instead of falling through to the dashboard."""
        raise NotFound(f"no API endpoint /api/{rest}; see /docs")

    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes)
    if settings.dashboard:
        _mount_dashboard(app, services)
    return app


def _document_ingest_body(app: FastAPI) -> None:
    """The ingest route reads its body itself; its model still goes into the OpenAPI document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = ingest.document_body(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _attach_alarms(services: Services) -> None:
    """Alarms plug in as an ingest listener, a router and a background worker."""
    if not services.settings.alarms:
        return
    try:
        from server.alarms.wiring import attach
    except ImportError:
        return
    attach(services)


def _mount_dashboard(app: FastAPI, services: Services) -> None:
    try:
        from a2wsgi import WSGIMiddleware

        from dashboard import create_dash
    except ImportError:
        log.warning("dashboard unavailable: the API runs without it")
        return
    dash_app = create_dash(services.query, alerts=services.extras.get("alerts"))
    app.mount("/", WSGIMiddleware(dash_app.server))  # type: ignore[arg-type]
