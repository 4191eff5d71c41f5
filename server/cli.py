"""The `mismatch` command line.

Commands that change state while a server runs (tokens, and the alarm commands) talk to it over
HTTP with `--url`, since a second process cannot open a DuckDB file a server holds; without
`--url` they open the database directly, which is how the first token is made.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer

from server.config import DEFAULT_DB, DEFAULT_PORT, Settings

app = typer.Typer(
    name="mismatch",
    help="Mismatch Monitor: watch the training-inference mismatch of online RL runs.",
    no_args_is_help=True,
    add_completion=False,
)
token_app = typer.Typer(help="Create, list and revoke API tokens.", no_args_is_help=True)
app.add_typer(token_app, name="token")

DbOpt = Annotated[
    str,
    typer.Option(
        "--db", envvar="MISMATCH_DB", help="DuckDB file path or SQLAlchemy URL (PostgreSQL)"
    ),
]
UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url", envvar="MISMATCH_URL", help="Talk to a running server instead of opening --db"
    ),
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", envvar="MISMATCH_TOKEN", help="Admin token for --url")
]


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code=2)


@app.command()
def serve(
    db: DbOpt = DEFAULT_DB,
    host: Annotated[str, typer.Option(help="Bind address; loopback by default")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = DEFAULT_PORT,
    insecure: Annotated[
        bool, typer.Option(help="Allow binding beyond loopback without any token")
    ] = False,
    max_body_bytes: Annotated[int, typer.Option(help="Largest accepted request body")] = 16 << 20,
    public_url: Annotated[
        str | None, typer.Option(help="Base URL for links in alerts (default: the bind address)")
    ] = None,
    no_dashboard: Annotated[bool, typer.Option("--no-dashboard", help="API only")] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
) -> None:
    """Migrate the database and serve the API and the dashboard."""
    import uvicorn

    from server.app import create_app
    from server.services.tokens import TokenService
    from server.storage import migrate
    from server.storage.db import Database

    try:
        settings = Settings(
            db=db,
            host=host,
            port=port,
            insecure=insecure,
            max_body_bytes=max_body_bytes,
            public_url=public_url,
            dashboard=not no_dashboard,
            log_level=log_level,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from exc
    if not settings.is_loopback and not settings.insecure:
        check = Database(settings.db)
        try:
            migrate.upgrade(check)
            has_tokens = TokenService(check).auth_enabled()
        finally:
            check.dispose()
        if not has_tokens:
            raise _fail(
                f"refusing to bind {host} without tokens: create one first with "
                f"`mismatch token create --db {db} --project P --scope admin`, "
                "or pass --insecure to serve an open API on the network"
            )
    try:
        application = create_app(settings)
    except Exception as exc:
        raise _fail(f"cannot open the database {db!r}: {exc}") from exc
    typer.echo(f"Mismatch Monitor on {settings.base_url}  (database: {db})")
    typer.echo(
        f"  feed it: collectors.init(url='{settings.base_url}')  or  make demo   "
        f"API docs: {settings.base_url}/docs"
    )
    uvicorn.run(application, host=host, port=port, log_level=log_level)


@app.command()
def migrate(db: DbOpt = DEFAULT_DB) -> None:
    """Create or upgrade the schema (idempotent)."""
    from server.storage import migrate as migrations
    from server.storage.db import Database

    database = Database(db)
    try:
        migrations.upgrade(database)
        typer.echo(
            f"schema at revision {migrations.current_revision(database)} ({database.dialect})"
        )
    except Exception as exc:
        raise _fail(f"migration failed: {exc}") from exc
    finally:
        database.dispose()


def _api(url: str, token: str | None, method: str, path: str, body: Any = None) -> Any:
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.request(
            method, url.rstrip("/") + path, json=body, headers=headers, timeout=30.0
        )
    except httpx.HTTPError as exc:
        raise _fail(f"cannot reach {url}: {exc}") from exc
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text
        raise _fail(f"{response.status_code}: {detail}")
    return response.json()


def _open_tokens(db: str) -> Any:
    from server.services.tokens import TokenService
    from server.storage import migrate as migrations
    from server.storage.db import Database

    database = Database(db)
    try:
        migrations.upgrade(database)
    except Exception as exc:
        database.dispose()
        if "lock" in str(exc).lower():
            raise _fail(
                f"{db} is held by a running server: pass --url http://127.0.0.1:{DEFAULT_PORT} "
                "(and --token with an admin token when auth is on)"
            ) from exc
        raise _fail(f"cannot open {db}: {exc}") from exc
    return database, TokenService(database)


@token_app.command("create")
def token_create(
    project: Annotated[str, typer.Option(help="Project the token belongs to")],
    scope: Annotated[str, typer.Option(help="ingest | read | admin")],
    name: Annotated[str, typer.Option(help="A note to recognise the token by")] = "",
    db: DbOpt = DEFAULT_DB,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a token and print it once (only its hash is stored)."""
    if scope not in ("ingest", "read", "admin"):
        raise _fail("--scope must be ingest, read or admin")
    if url:
        created = _api(
            url, token, "POST", "/api/v1/tokens", {"project": project, "scope": scope, "name": name}
        )
        typer.echo(created["token"])
        typer.echo(f"created {scope} token {created['id']} for project {project}", err=True)
        return
    database, tokens = _open_tokens(db)
    try:
        info, secret = tokens.create(project=project, scope=scope, name=name)
    except Exception as exc:
        raise _fail(str(exc)) from exc
    finally:
        database.dispose()
    typer.echo(secret)
    typer.echo(
        f"created {scope} token {info.id} for project {project}; it is shown only once", err=True
    )


@token_app.command("list")
def token_list(
    project: Annotated[str | None, typer.Option(help="Only this project")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include revoked tokens")] = False,
    db: DbOpt = DEFAULT_DB,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List tokens (ids, projects, scopes; never the secrets)."""
    if url:
        query = f"?include_revoked={'true' if all_ else 'false'}" + (
            f"&project={project}" if project else ""
        )
        rows = _api(url, token, "GET", "/api/v1/tokens" + query)["data"]
    else:
        database, tokens = _open_tokens(db)
        try:
            rows = [i.__dict__ for i in tokens.list(project=project, include_revoked=all_)]
        finally:
            database.dispose()
    for row in rows:
        state = "revoked" if row["revoked_at"] else "active"
        typer.echo(f"{row['id']}\t{row['project']}\t{row['scope']}\t{state}\t{row['name']}")


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The token id (second part of mm_<id>_…)")],
    db: DbOpt = DEFAULT_DB,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Revoke a token; requests with it are refused from then on."""
    if url:
        _api(url, token, "DELETE", f"/api/v1/tokens/{token_id}")
    else:
        database, tokens = _open_tokens(db)
        try:
            tokens.revoke(token_id)
        except Exception as exc:
            raise _fail(str(exc)) from exc
        finally:
            database.dispose()
    typer.echo(f"revoked {token_id}")


@app.command()
def openapi() -> None:
    """Print the OpenAPI document (the contract the collectors follow)."""
    from server.app import create_app

    os.environ.setdefault("MISMATCH_DB", ":memory:")
    application = create_app(
        Settings(db=":memory:", dashboard=False, alarms=False), migrate_db=False
    )
    json.dump(application.openapi(), sys.stdout, indent=2)
    sys.stdout.write("\n")


def _mount_optional() -> None:
    """Sub-commands that live beside their feature (alarms, demo) join when installed."""
    try:
        from server.cli_alarms import register
    except ImportError:
        pass
    else:
        register(app)
    try:
        from server.demo.cli import register as register_demo
    except ImportError:
        pass
    else:
        register_demo(app)


_mount_optional()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
