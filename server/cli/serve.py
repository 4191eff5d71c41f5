"""`mismatch serve | migrate | openapi`: run the server, shape its database, print its contract."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from server.cli import listen
from server.cli.common import DEFAULT_DB, DbOpt, fail
from server.cli.identity_options import (
    AuthProxyFromOpt,
    AuthProxyGroupsHeaderOpt,
    AuthProxyHeaderOpt,
    IdentityMapOpt,
    OidcClientIdOpt,
    OidcGroupsClaimOpt,
    OidcIssuerOpt,
)
from server.config import DEFAULT_PORT, Settings
from server.identity.local_access import LocalAccess
from server.storage.db import Database
from server.storage.schema import migrate as migrations
from server.storage.writing import compaction

if TYPE_CHECKING:
    from fastapi import FastAPI

MaxInflightOpt = Annotated[
    int | None,
    typer.Option(
        help="Bytes of request bodies held in memory at once, server-wide; a write past it is "
        "answered 503 with Retry-After (default: 4 × --max-body-bytes)"
    ),
]
AllowedHostOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allowed-host",
        help="Also answer requests whose Host header names this host (repeatable); besides the "
        "bind address, the --public-url host and, on loopback, localhost",
    ),
]
BodyTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        help="A request body must arrive within this many seconds of its headers, else 408 and "
        "its memory is released (default 30)"
    ),
]
InflightShareOpt = Annotated[
    float | None,
    typer.Option(
        help="The fraction of --max-inflight-bytes one project's requests may hold at once, "
        "beyond their first (default 0.5)"
    ),
]
AnalysisTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        help="Stop an analytical request (backtest, hardware comparison, series, exemplars) "
        "still working after this many seconds and answer 503 (default 20)"
    ),
]

STARTUP_FAILURE = 3
"""The exit status when the server could not start (uvicorn's own, for one that cannot bind)."""

SHUTDOWN_GRACE_S = 5
"""On SIGTERM, requests in flight get this long to finish (an ingest commits before it answers,
so nothing acknowledged is lost); then they are cancelled, which stops analytical work at its
next deadline check, and the server exits well within the 10 s an orchestrator usually waits
before SIGKILL."""

CorsOriginOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--cors-origin",
        help="Let pages of this origin (scheme://host[:port]) call the API from a browser, "
        "writes included (repeatable; default: no cross-origin access)",
    ),
]


_SETTING_OF = {"allowed_host": "allowed_hosts", "cors_origin": "cors_origins"}
"""Options whose setting has another name (a repeatable option is named in the singular)."""


def serve(
    db: DbOpt = DEFAULT_DB,
    host: Annotated[str, typer.Option(help="Bind address; loopback by default")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = DEFAULT_PORT,
    insecure: Annotated[
        bool, typer.Option(help="Allow binding beyond loopback without any token")
    ] = False,
    max_body_bytes: Annotated[int, typer.Option(help="Largest accepted request body")] = 16 << 20,
    max_inflight_bytes: MaxInflightOpt = None,
    public_url: Annotated[
        str | None, typer.Option(help="Base URL for links in alerts (default: the bind address)")
    ] = None,
    webhook_allow: Annotated[
        list[str] | None,
        typer.Option(
            "--webhook-allow",
            help="Allow webhooks to this CIDR or host name beyond public addresses (repeatable)",
        ),
    ] = None,
    allowed_host: AllowedHostOpt = None,
    cors_origin: CorsOriginOpt = None,
    retention_days: Annotated[
        float | None,
        typer.Option(
            help="Drop raw values of runs quiet this many days (rollups stay); default: keep"
        ),
    ] = None,
    refresh_s: Annotated[
        float | None, typer.Option(help="Dashboard refresh of live runs, seconds (default 10)")
    ] = None,
    session_ttl_s: Annotated[
        float | None, typer.Option(help="How long a dashboard sign-in lasts, seconds (12 h)")
    ] = None,
    metrics_token: Annotated[
        str | None,
        typer.Option(
            help="A secret Prometheus sends as `Authorization: Bearer …` to scrape /metrics "
            "(every project); read tokens see their project's runs only",
            envvar="MISMATCH_METRICS_TOKEN",
        ),
    ] = None,
    alert_group_wait_s: Annotated[
        float | None, typer.Option(help="Hold an incident's first message this long (default 0)")
    ] = None,
    incident_window_steps: Annotated[
        int | None, typer.Option(help="A run's alerts this close in steps form one incident")
    ] = None,
    analysis_timeout_s: AnalysisTimeoutOpt = None,
    body_timeout_s: BodyTimeoutOpt = None,
    inflight_share: InflightShareOpt = None,
    oidc_issuer: OidcIssuerOpt = None,
    oidc_client_id: OidcClientIdOpt = None,
    oidc_groups_claim: OidcGroupsClaimOpt = None,
    identity_map: IdentityMapOpt = None,
    auth_proxy_header: AuthProxyHeaderOpt = None,
    auth_proxy_groups_header: AuthProxyGroupsHeaderOpt = None,
    auth_proxy_from: AuthProxyFromOpt = None,
    no_dashboard: Annotated[bool, typer.Option("--no-dashboard", help="API only")] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
) -> None:
    """Migrate the database and serve the API and the dashboard."""
    given = {_SETTING_OF.get(name, name): value for name, value in locals().items()}
    given["dashboard"] = not given.pop("no_dashboard")
    try:
        # An option left unset (None, or no repeatable value) falls back to env or default.
        settings = Settings(**{k: v for k, v in given.items() if v is not None and v != []})
    except ValueError as exc:
        fail(str(exc))
    _start(settings)


def _start(settings: Settings) -> None:
    """Check the bind, open the database and serve until stopped."""
    import uvicorn

    from server.app import create_app

    if not settings.is_loopback and not settings.insecure:
        _require_tokens(settings)
    try:
        application = create_app(settings)
    except Exception as exc:
        fail(f"cannot open the database {settings.db!r}: {exc}")
    sockets = None
    if settings.host == listen.IPV6_WILDCARD:
        try:
            sockets = [listen.dual_stack(settings.port)]
        except OSError as exc:
            fail(f"cannot listen on [::]:{settings.port} (IPv4 and IPv6): {exc}")
    typer.echo(f"Mismatch Monitor on {settings.base_url}  (database: {settings.db})")
    typer.echo(f"  listening on {listen.listening_on(settings.host)}, port {settings.port}")
    typer.echo(
        f"  feed it: collectors.init(url='{settings.base_url}')  or  make demo   "
        f"API docs: {settings.base_url}/docs"
    )
    local = _offer_signin(application, settings) if settings.is_loopback else None
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "timeout_graceful_shutdown": SHUTDOWN_GRACE_S,
        # The auth proxy is trusted by its TCP address: never let a forwarded-for header
        # stand in for it.
        "proxy_headers": not settings.auth_proxy_header,
    }
    try:
        if sockets is None:
            uvicorn.run(application, **options)
            return
        server = uvicorn.Server(uvicorn.Config(application, **options))
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn has shut down already
            server.run(sockets=sockets)
        if not server.started:
            sys.exit(STARTUP_FAILURE)
    finally:  # also when uvicorn never started the app (its port was taken)
        if local is not None:
            local.close()


def _offer_signin(application: FastAPI, settings: Settings) -> LocalAccess | None:
    """Write the local access file and say how the person at this machine gets in: a one-time
    sign-in link now when tokens are required, `mismatch signin` at any later time."""
    local: LocalAccess = application.state.services.local
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    url = f"http://{host}:{settings.port}"
    if local.publish(url=url, db=settings.db, port=settings.port) is None:
        return None  # another server holds the port: uvicorn says so next
    if local.tokens.auth_enabled():
        typer.echo(f"  sign in (this machine, one use, 10 min): {local.link().url}")
    typer.echo(
        f"  locked out of the dashboard or the admin commands? on this machine: "
        f"mismatch signin --url {url}"
    )
    return local


def _require_tokens(settings: Settings) -> None:
    """Refuse to serve beyond loopback while the database holds no token."""
    from server.services.tokens import TokenService

    check = Database(settings.db)
    try:
        migrations.upgrade(check)
        has_tokens = TokenService(check).auth_enabled()
    finally:
        check.dispose()
    if not has_tokens:
        fail(
            f"refusing to bind {settings.host} without tokens: create one first with "
            f"`mismatch token first --db {settings.db}`, "
            "or pass --insecure to serve an open API on the network"
        )


def migrate(db: DbOpt = DEFAULT_DB) -> None:
    """Create or upgrade the schema (idempotent), then sort what an upgrade left in the hot
    tables into compacted chunks and rollups, with a progress bar."""
    database = Database(db)
    try:
        migrations.upgrade(database)
        typer.echo(
            f"schema at revision {migrations.current_revision(database)} ({database.dialect})"
        )
        with typer.progressbar(length=1, label="compacting stored values") as bar:

            def progress(done: int, total: int) -> None:
                bar.length = max(total, 1)
                bar.update(done - bar.pos)

            moved = compaction.compact_all(database, progress)
        if moved:
            typer.echo(f"compacted {moved:,} values")
    except Exception as exc:
        fail(f"migration failed: {exc}")
    finally:
        database.dispose()


def openapi() -> None:
    """Print the OpenAPI document (the contract the collectors follow)."""
    from server.app import create_app

    application = create_app(
        Settings(db=":memory:", dashboard=False, alarms=False), migrate_db=False
    )
    json.dump(application.openapi(), sys.stdout, indent=2)
    sys.stdout.write("\n")


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command()(migrate)
    app.command()(openapi)
