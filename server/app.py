"""The composition root: wires storage, services, API, alarms and the dashboard together.

Nothing else constructs services; routes and the dashboard receive what they need from here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from a2wsgi import WSGIMiddleware
from fastapi import FastAPI

from collectors.wire import __version__
from dashboard import create_dash
from server.alarms import wiring
from server.alarms.recording.incidents import Grouping
from server.api import docs, errors
from server.api.callers import Callers
from server.api.crosssite import (
    CORS,
    CrossOriginCheck,
    HostCheck,
    allowed_hosts,
    trusted_origins,
)
from server.api.dash_callbacks import CALLBACK_PATH, DashCallbackCheck
from server.api.gate import DashboardGate
from server.api.middleware import BodyLimitMiddleware, InflightBudget
from server.api.responses import JSONResponse
from server.api.routes import (
    alarms,
    attribution,
    exports,
    health,
    identity,
    incidents,
    ingest,
    local_access,
    maintenance,
    oidc,
    personal_tokens,
    projects,
    run_list,
    runs,
    session,
    tokens,
)
from server.config import Settings
from server.container import Services
from server.domain.alarms import Alert
from server.errors import NotFound
from server.identity import wiring as people
from server.identity.local_access import LocalAccess
from server.services.ingest import IngestService
from server.services.maintenance import Maintenance
from server.services.projects import ProjectService
from server.services.reads.port import Reads
from server.services.reads.run_view import Markers
from server.services.sessions import Sessions
from server.services.tokens import TokenService
from server.storage.db import Database
from server.storage.identity import secrets as server_secrets
from server.storage.schema import migrate
from server.telemetry import Telemetry

VERSION = __version__  # the collectors' and the server's distributions share it


def build_services(settings: Settings, *, db: Database | None = None) -> Services:
    db = db or Database(settings.db)
    alarms = (
        wiring.build(
            db,
            base_url=settings.base_url,
            policy=settings.webhook_policy,
            grouping=Grouping(settings.incident_window_steps, settings.alert_group_wait_s),
        )
        if settings.alarms
        else None
    )
    reads = Reads.over(db, live_window_s=settings.live_window_s, markers=_markers(alarms))
    telemetry = Telemetry(reads.runs)
    maintenance = Maintenance(db, retention_days=settings.retention_days)
    ingest_service = IngestService(db, listeners=[telemetry, maintenance])
    token_service = TokenService(
        db,
        require_tokens=settings.identity_enabled
        or (not settings.is_loopback and not settings.insecure),
    )
    sessions = Sessions(
        token_service,
        lambda: server_secrets.load_or_create(db, "session"),
        db=db,
        ttl_s=settings.session_ttl_s,
        secure=settings.base_url.startswith("https://"),
    )
    services = Services(
        settings,
        db,
        reads,
        ingest_service,
        token_service,
        telemetry,
        maintenance,
        sessions,
        ProjectService(db),
        people.build(settings, db, tokens=token_service, sessions=sessions),
        LocalAccess(token_service, sessions),
        alarms=alarms,
    )
    if alarms is not None:
        ingest_service.listeners.append(alarms.service)
        telemetry.count_rule_errors(alarms.service.evaluator.failure_counts)
    return services


def _markers(alarms: wiring.Alarms | None) -> Markers | None:
    """The run page's alert markers: the alarm feature's, when the server runs one."""
    if alarms is None:
        return None

    def markers(run_id: str, projects: Sequence[str]) -> list[Alert]:
        return alarms.markers(run_id, projects=projects)

    return markers


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
        docs_url=None,  # served from the package instead (server.api.docs): no CDN
        redoc_url=None,
    )
    app.state.services = services
    errors.install(app)
    docs.install(app)
    api = (
        health,
        ingest,
        run_list,
        runs,
        exports,
        attribution,
        projects,
        tokens,
        alarms,
        incidents,
    )
    for module in (*api, maintenance, identity, personal_tokens, session, local_access, oidc):
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

    dash_callbacks = "/" + CALLBACK_PATH
    _add_middleware(app, settings, services, json_paths=("/api/", dash_callbacks))
    if settings.dashboard:
        dash_app = create_dash(services.reads, poll_ms=int(settings.refresh_s * 1000))
        dashboard = WSGIMiddleware(dash_app.server)
        checked = DashCallbackCheck(
            dashboard,  # type: ignore[arg-type]  # a2wsgi types its ASGI messages narrowly
            path=dash_callbacks,
            callbacks=dash_app.callback_map,
        )
        app.mount("/", checked)
    return app


def _add_middleware(
    app: FastAPI, settings: Settings, services: Services, *, json_paths: tuple[str, ...]
) -> None:
    """Outermost first, a request meets: the Host check, CORS (only for configured origins),
    the cross-origin and JSON checks, the dashboard's sign-in gate, then the body limit and
    budget (so a request refused for who or where it is never has its body read), whose
    shares go by the caller its credentials name."""
    budget = InflightBudget(settings.inflight_budget_bytes, share=settings.inflight_share)
    app.add_middleware(
        BodyLimitMiddleware,
        max_body_bytes=settings.max_body_bytes,
        budget=budget,
        identify=Callers(services.people.identity),
        body_timeout_s=settings.body_timeout_s,
    )
    app.add_middleware(DashboardGate, identity=services.people.identity)
    app.add_middleware(CrossOriginCheck, trusted=trusted_origins(settings), json_paths=json_paths)
    if settings.cors_origins:
        app.add_middleware(
            CORS,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Content-Encoding"],
            max_age=600,
        )
    app.add_middleware(HostCheck, hosts=allowed_hosts(settings))


def _document_ingest_body(app: FastAPI) -> None:
    """The ingest route reads its body itself; its model still goes into the OpenAPI document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = ingest.document_body(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
