"""`mismatch token create | list | revoke`.

With `--url` they go through a running server's API (a second process cannot open a DuckDB file
a server holds); without it they open the database directly, which is how the first token is
made.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer

from server.auth import OPEN
from server.cli.common import (
    DEFAULT_DB,
    DbOpt,
    MaybeUrlOpt,
    TokenOpt,
    api,
    fail,
    local_call,
    open_database,
)
from server.domain.scopes import SCOPES
from server.errors import MonitorError
from server.identity import local_file
from server.identity.members import Members
from server.identity.personal_tokens import PersonalTokens, is_personal
from server.services.tokens import TokenService
from server.storage.db import Database

tokens = typer.Typer(help="Create, list and revoke API tokens.", no_args_is_help=True)


def _open(db: str) -> tuple[Database, TokenService]:
    database = open_database(db)
    return database, TokenService(database)


@tokens.command("create")
def create(
    scope: Annotated[str | None, typer.Option(help=" | ".join(SCOPES))] = None,
    project: Annotated[
        str | None, typer.Option(help="Project the token belongs to (not for server-admin)")
    ] = None,
    name: Annotated[str, typer.Option(help="A note to recognise the token by")] = "",
    user: Annotated[
        str | None,
        typer.Option(
            help="A person's own token instead, for the person with this id (ISSUER#SUBJECT, as "
            "/api/v1/me shows it): it acts with the projects mapped to them (mismatch member "
            "add), at each request (no --scope or --project)"
        ),
    ] = None,
    db: DbOpt = DEFAULT_DB,
    url: MaybeUrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a token and print it once (only its hash is stored). A server-admin token
    (every project, token management included) is made only here, against the database, and
    so is a person's own token for another user (a person makes theirs at /api/v1/me/tokens)."""
    if user is not None:
        if scope is not None or project is not None or url:
            fail("--user makes a person's own token against the database: no --scope, --project "
                 "or --url (people make their own at POST /api/v1/me/tokens)")  # fmt: skip
        _create_personal(db, user, name)
        return
    if scope is None or scope not in SCOPES:
        fail(f"--scope must be one of {', '.join(SCOPES)}")
    if (scope == "server-admin") == (project is not None):
        fail("give --project for ingest, read and admin tokens, and none for server-admin")
    if url:
        if scope == "server-admin":
            fail("server-admin tokens are made against the database: use --db, not --url")
        body = {"project": project, "scope": scope, "name": name}
        created = api(url, token, "POST", "/api/v1/tokens", body)
        typer.echo(created["token"])
        typer.echo(f"created {scope} token {created['id']} for project {project}", err=True)
        if local_file.for_url(url) is not None:
            link = local_call(url, "/api/v1/local/signin-link")["url"]
            typer.echo(f"dashboard sign-in on this machine (one use, 10 min): {link}", err=True)
        return
    database, service = _open(db)
    try:
        info, secret = service.create(project=project, scope=scope, name=name)
    except MonitorError as exc:
        fail(exc.message)
    finally:
        database.dispose()
    typer.echo(secret)
    where = "every project" if scope == "server-admin" else f"project {project}"
    typer.echo(f"created {scope} token {info.id} for {where}; it is shown only once", err=True)


def _create_personal(db: str, user: str, name: str) -> None:
    database, _ = _open(db)
    try:
        personal = PersonalTokens(database, Members(database))
        made, secret = personal.create(by=OPEN, user=user, name=name)
    except MonitorError as exc:
        fail(exc.message)
    finally:
        database.dispose()
    typer.echo(secret)
    typer.echo(
        f"created personal token {made.id} of {made.owner}: it acts with their project "
        "mappings and stops when they are removed; it is shown only once",
        err=True,
    )


@tokens.command("list")
def list_(
    project: Annotated[str | None, typer.Option(help="Only this project")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Include revoked tokens")] = False,
    db: DbOpt = DEFAULT_DB,
    url: MaybeUrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List tokens (ids, projects, scopes; never the secrets)."""
    rows: list[dict[str, Any]]
    if url:
        params = {"include_revoked": "true" if all_ else "false", "project": project}
        rows = api(url, token, "GET", "/api/v1/tokens", params=params)["data"]
    else:
        database, service = _open(db)
        try:
            rows = [
                dataclasses.asdict(i) for i in service.list(project=project, include_revoked=all_)
            ]
        finally:
            database.dispose()
    for row in rows:
        state = "revoked" if row["revoked_at"] else "active"
        typer.echo(f"{row['id']}\t{row['project']}\t{row['scope']}\t{state}\t{row['name']}")


@tokens.command("revoke")
def revoke(
    token_id: Annotated[str, typer.Argument(help="The token id (second part of mm_<id>_…)")],
    db: DbOpt = DEFAULT_DB,
    url: MaybeUrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Revoke a token; requests with it are refused from then on."""
    if url:
        api(url, token, "DELETE", f"/api/v1/tokens/{token_id}")
    else:
        database, service = _open(db)
        try:
            if is_personal(token_id):
                PersonalTokens(database, Members(database)).revoke(token_id, owner=None)
            else:
                service.revoke(token_id)
        except MonitorError as exc:
            fail(exc.message)
        finally:
            database.dispose()
    typer.echo(f"revoked {token_id}")


@tokens.command("first")
def first(db: DbOpt = DEFAULT_DB) -> None:
    """Make the first token of a new deployment, a server-admin one, and print it; do nothing
    when the database already has an active token (so a start-up step can run it every time)."""
    database, service = _open(db)
    try:
        if service.auth_enabled():
            typer.echo("tokens exist already; none made", err=True)
            return
        info, secret = service.create(project=None, scope="server-admin", name="first")
    finally:
        database.dispose()
    typer.echo(secret)
    typer.echo(
        f"created server-admin token {info.id}; it is shown only once. Make project tokens "
        "with `mismatch token create --url URL --token THIS --project P --scope admin`",
        err=True,
    )
