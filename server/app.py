"""The composition root: wires storage, services, API, alarms and the dashboard together.

Nothing else constructs services; routes and the dashboard receive what they need from here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from a2wsgi import WSGIMiddleware
from fastapi import FastAPI

from dashboard import create_dash
from server.alarms import wiring
from server.alarms.incidents import Grouping
from server.api import errors
from server.api.middleware import BodyLimitMiddleware
from server.api.responses import JSONResponse
from server.api.routes import alarms, health, ingest, maintenance, projects, runs, tokens
from server.config import Settings
from server.container import Services
from server.errors import NotFound
from server.services.ingest import IngestService
from server.services.maintenance import Maintenance
from server.services.projects import ProjectService
from server.services.query import QueryService
from server.services.tokens import TokenService
from server.storage import migrate
from server.storage.db import Database
from server.telemetry import Telemetry

VERSION = "0.1.0"


def build_services(settings: Settings, *, db: Database | None = None) -> Services:
    db = db or Database(settings.db)
    query = QueryService(db, live_window_s=settings.live_window_s)
    telemetry = Telemetry(query)
    maintenance = Maintenance(db, retention_days=settings.retention_days)
    ingest_service = IngestService(db, listeners=[telemetry, maintenance])
    token_service = TokenService(
        db, require_tokens=not settings.is_loopback and not settings.insecure
    )
    services = Services(
        settings,
        db,
        query,
        ingest_service,
        token_service,
        telemetry,
        maintenance,
        ProjectService(db),
    )
    if settings.alarms:
        services.alarms = wiring.build(
            db,
            base_url=settings.base_url,
            policy=settings.webhook_policy,
            grouping=Grouping(settings.incident_window_steps, settings.alert_group_wait_s),
        )
        ingest_service.listeners.append(services.alarms)
    return services


def create_app(settings: Settings | None = None, *, migrate_db: bool = True) -> FastAPI:
    settings = settings or Settings()
    db = Database(settings.db)
    if migrate_db:  # before the alarm service reads its states
        migrate.upgrade(db)
    services = build_services(settings, db=db)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        services.start()
        try:
            yield
        finally:
            services.close()

    app = FastAPI(
        title="Mismatch Monitor",
        version=VERSION,
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
    routers = (health, ingest, runs, projects, tokens, alarms, maintenance)
    for module in routers:
        app.include_router(module.router)
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
        dash_app = create_dash(
            services.query, alerts=services.alarms, poll_ms=int(settings.refresh_s * 1000)
        )
        app.mount("/", WSGIMiddleware(dash_app.server))  # type: ignore[arg-type]
    return app


def _document_ingest_body(app: FastAPI) -> None:
    """The ingest route reads its body itself; its model still goes into the OpenAPI document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = ingest.document_body(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
